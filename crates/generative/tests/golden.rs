//! Probabilities agree with scikit-learn 1.9 to 1e-8 on iris and wine, where the definitions
//! coincide. The reference values come from `golden/make_golden.py` (run once; see its header)
//! and are committed as `golden/golden.json`.

#![allow(clippy::unwrap_used)]

mod common;

use common::{load, max_abs_diff};
use faer::Mat;
use generative::*;
use serde_json::Value;

fn golden() -> Value {
    let text = include_str!("golden/golden.json");
    serde_json::from_str(text).unwrap()
}

fn matrix(v: &Value) -> Mat<f64> {
    let rows = v.as_array().unwrap();
    let cols = rows[0].as_array().unwrap().len();
    Mat::from_fn(rows.len(), cols, |i, j| rows[i][j].as_f64().unwrap())
}

fn check<M: GenerativeClassifier>(model: &M, x: &Mat<f64>, want: &Value, what: &str) {
    let got = model.predict_proba(x.as_ref()).unwrap();
    let diff = max_abs_diff(got.as_ref(), matrix(&want["proba"]).as_ref());
    assert!(diff < 1e-8, "{what}: max |Δp| = {diff:e}");
}

#[test]
fn probabilities_match_scikit_learn() {
    let g = golden();
    for name in ["iris", "wine"] {
        let (x, y, classes) = load(name);
        let entry = &g["datasets"][name];
        assert_eq!(entry["classes"].as_array().unwrap().len(), classes.len());
        let yg: Vec<usize> = entry["y"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(yg, y);
        let k = classes.len();
        let models = &entry["models"];

        let lda = GaussianParams::default()
            .check()
            .unwrap()
            .fit(x.as_ref(), &y, k)
            .unwrap();
        check(&lda, &x, &models["lda"], &format!("{name} LDA"));
        let disc = lda.linear_discriminant().unwrap();
        let coef = matrix(&models["lda"]["coef"]);
        let d = x.ncols();
        for c in 0..k {
            for j in 0..d {
                let (a, b) = (disc.weights[c * d + j], coef[(c, j)]);
                assert!(
                    (a - b).abs() < 1e-8 * (1.0 + b.abs()),
                    "{name} coef[{c},{j}]: {a} vs {b}"
                );
            }
            let b = models["lda"]["intercept"][c].as_f64().unwrap();
            assert!(
                (disc.intercepts[c] - b).abs() < 1e-8 * (1.0 + b.abs()),
                "{name} intercept[{c}]"
            );
        }

        for (key, shrink) in [
            ("lda_shrink_auto", Shrinkage::LedoitWolf),
            ("lda_shrink_0.3", Shrinkage::Fixed(0.3)),
        ] {
            let p = GaussianParams {
                shrinkage: Some(shrink),
                ..Default::default()
            };
            let m = p.check().unwrap().fit(x.as_ref(), &y, k).unwrap();
            check(&m, &x, &models[key], &format!("{name} {key}"));
        }

        let gnb = GaussianParams::with_structure(CovarianceStructure::Diagonal)
            .check()
            .unwrap()
            .fit(x.as_ref(), &y, k)
            .unwrap();
        check(
            &gnb,
            &x,
            &models["gaussian_nb"],
            &format!("{name} GaussianNB"),
        );

        let t = entry["binarize"].as_f64().unwrap();
        let bnb = BernoulliNbParams {
            binarize: Some(t),
            ..Default::default()
        }
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, k)
        .unwrap();
        check(
            &bnb,
            &x,
            &models["bernoulli_nb"],
            &format!("{name} BernoulliNB"),
        );

        let mnb = MultinomialNbParams::default()
            .check()
            .unwrap()
            .fit(x.as_ref(), &y, k)
            .unwrap();
        check(
            &mnb,
            &x,
            &models["multinomial_nb"],
            &format!("{name} MultinomialNB"),
        );
        let mnb = MultinomialNbParams {
            alpha: 0.5,
            ..Default::default()
        }
        .check()
        .unwrap()
        .fit(x.as_ref(), &y, k)
        .unwrap();
        check(
            &mnb,
            &x,
            &models["multinomial_nb_alpha0.5"],
            &format!("{name} MultinomialNB α=0.5"),
        );

        let xc = matrix(&entry["x_categorical"]);
        let cnb = CategoricalNbParams::default()
            .check()
            .unwrap()
            .fit(xc.as_ref(), &y, k)
            .unwrap();
        check(
            &cnb,
            &xc,
            &models["categorical_nb"],
            &format!("{name} CategoricalNB"),
        );
    }
}
