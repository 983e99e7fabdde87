//! Properties and scenario checks of semi-supervised EM.

#![allow(clippy::unwrap_used)]

use faer::Mat;
use generative::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use ssl_em::scenarios::*;
use ssl_em::*;

fn qda() -> Checked<GaussianParams> {
    GaussianParams::with_structure(CovarianceStructure::Full)
        .check()
        .unwrap()
}

fn try_fit_qda(s: &Scenario, params: EmParams) -> ssl_em::Result<EmFit<GaussianClassifier>> {
    SemiSupervisedEm::new(qda(), params).unwrap().fit(
        s.x_labeled.as_ref(),
        &s.y_labeled,
        s.n_classes,
        s.x_unlabeled.as_ref(),
    )
}

fn fit_qda(s: &Scenario, params: EmParams) -> EmFit<GaussianClassifier> {
    try_fit_qda(s, params).unwrap()
}

fn auto() -> EmParams {
    EmParams {
        lambda: Lambda::Auto(CvOptions::default()),
        ..Default::default()
    }
}

fn random_problem(
    seed: u64,
    n_lab: usize,
    n_unl: usize,
    k: usize,
) -> (Mat<f64>, Vec<usize>, Mat<f64>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut draw = |n: usize| {
        let y: Vec<usize> = (0..n).map(|i| i % k).collect();
        let x = Mat::from_fn(n, 2, |i, j| {
            let z: f64 = StandardNormal.sample(&mut rng);
            z + (y[i] as f64) * if j == 0 { 1.5 } else { -0.8 }
        });
        (x, y)
    };
    let (xl, yl) = draw(n_lab);
    let (xu, _) = draw(n_unl);
    (xl, yl, xu)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Soft EM never decreases L(θ) = Σ_L ln p(x, y) + λ Σ_U ln p(x) (+ the smoothing prior).
    #[test]
    fn soft_em_never_decreases_the_objective(seed in 0u64..10_000, lambda in 0.05f64..1.0, k in 2usize..4, structure in 0usize..5) {
        let (xl, yl, xu) = random_problem(seed, 8 * k, 300, k);
        use CovarianceStructure::*;
        let s = [Full, Tied, Diagonal, Spherical, TiedDiagonal][structure];
        let spec = GaussianParams { structure: s, var_smoothing: 0.0, ..Default::default() }.check().unwrap();
        let params = EmParams { lambda: Lambda::Fixed(lambda), max_iter: 60, tol: 0.0, ..Default::default() };
        let fit = SemiSupervisedEm::new(spec, params).unwrap().fit(xl.as_ref(), &yl, k, xu.as_ref()).unwrap();
        for w in fit.report.trace.windows(2) {
            let (a, b) = (w[0].objective, w[1].objective);
            prop_assert!(b >= a - 1e-9 * a.abs(), "{:?}: {} -> {}", s, a, b);
        }
        // Multinomial naive Bayes on non-negative counts, with its Dirichlet smoothing prior.
        let xl2 = Mat::from_fn(xl.nrows(), 2, |i, j| (xl[(i, j)] + 4.0).max(0.0).round());
        let xu2 = Mat::from_fn(xu.nrows(), 2, |i, j| (xu[(i, j)] + 4.0).max(0.0).round());
        let params = EmParams { lambda: Lambda::Fixed(lambda), max_iter: 60, tol: 0.0, ..Default::default() };
        let fit = SemiSupervisedEm::new(MultinomialNbParams::default().check().unwrap(), params).unwrap().fit(xl2.as_ref(), &yl, k, xu2.as_ref()).unwrap();
        for w in fit.report.trace.windows(2) {
            prop_assert!(w[1].objective >= w[0].objective - 1e-9 * w[0].objective.abs());
        }
    }
}

#[test]
fn semi_supervised_qda_beats_labeled_only_on_seed_000_across_seeds() {
    let mut gains = Vec::new();
    for seed in 0..8 {
        let s = seed000(seed, 10);
        let sup = qda().fit(s.x_labeled.as_ref(), &s.y_labeled, 2).unwrap();
        let a_sup = accuracy(
            &sup.predict(s.x_unlabeled.as_ref()).unwrap(),
            &s.y_unlabeled,
        );
        let fit = fit_qda(&s, EmParams::default());
        let a_ssl = accuracy(
            &fit.model.predict(s.x_unlabeled.as_ref()).unwrap(),
            &s.y_unlabeled,
        );
        assert!(
            fit.report.converged,
            "seed {seed} did not converge in {} iterations",
            fit.report.iterations
        );
        assert!(
            a_ssl > a_sup - 0.02,
            "seed {seed}: semi-supervised {a_ssl} much worse than {a_sup}"
        );
        assert_eq!(
            fit.report.diagnostic.as_ref().unwrap().verdict,
            Verdict::Ok,
            "seed {seed}"
        );
        gains.push(a_ssl - a_sup);
    }
    let mean_gain = gains.iter().sum::<f64>() / gains.len() as f64;
    let wins = gains.iter().filter(|g| **g > 0.0).count();
    assert!(mean_gain > 0.025 && wins >= 6, "gains {gains:?}");
}

#[test]
fn wrong_model_for_unlabeled_data_is_caught() {
    for seed in 0..4 {
        let s = shifted_unlabeled(seed, 10, 1000);
        let sup = qda().fit(s.x_labeled.as_ref(), &s.y_labeled, 2).unwrap();
        let a_sup = accuracy(&sup.predict(s.x_test.as_ref()).unwrap(), &s.y_test);
        let plain = fit_qda(&s, EmParams::default());
        let a_plain = accuracy(&plain.model.predict(s.x_test.as_ref()).unwrap(), &s.y_test);
        assert!(
            a_plain < a_sup - 0.1,
            "seed {seed}: λ = 1 should hurt ({a_plain} vs {a_sup})"
        );
        let d = plain.report.diagnostic.as_ref().unwrap();
        assert_eq!(d.verdict, Verdict::Dominated, "seed {seed}: {d:?}");
        assert!(d.suggestion.as_ref().unwrap().contains("lower lambda"));
        let chosen = fit_qda(&s, auto());
        assert!(
            chosen.report.lambda <= 0.03,
            "seed {seed}: auto λ = {}",
            chosen.report.lambda
        );
        let curve = chosen.report.lambda_curve.as_ref().unwrap();
        assert_eq!(curve.len(), 6);
        let loss = |l: f64| {
            curve
                .iter()
                .find(|c| c.lambda == l)
                .unwrap()
                .log_loss
                .unwrap()
        };
        assert!(loss(1.0) > loss(chosen.report.lambda));
        let a_auto = accuracy(&chosen.model.predict(s.x_test.as_ref()).unwrap(), &s.y_test);
        assert!(
            a_auto > a_plain + 0.1,
            "seed {seed}: auto {a_auto} vs λ=1 {a_plain}"
        );
    }
}

#[test]
fn two_components_per_class_beat_one_on_data_that_has_them() {
    for seed in 0..4 {
        let s = two_clusters_per_class(seed, 10, 1000);
        let one = fit_qda(&s, EmParams::default());
        let two = fit_qda(
            &s,
            EmParams {
                components: Components::Uniform(2),
                ..Default::default()
            },
        );
        let a1 = accuracy(&one.model.predict(s.x_test.as_ref()).unwrap(), &s.y_test);
        let a2 = accuracy(&two.model.predict(s.x_test.as_ref()).unwrap(), &s.y_test);
        assert!(a2 > 0.9 && a2 > a1 + 0.2, "seed {seed}: two {a2}, one {a1}");
        assert_eq!(two.report.components_per_class, vec![2, 2]);
        let bic = fit_qda(
            &s,
            EmParams {
                components: Components::Bic { max: 3 },
                ..Default::default()
            },
        );
        assert_eq!(
            bic.report.components_per_class,
            vec![2, 2],
            "seed {seed}: {:?}",
            bic.report.bic
        );
    }
}

#[test]
fn lambda_zero_reproduces_the_supervised_fit_exactly() {
    let s = seed000(3, 10);
    for structure in [
        CovarianceStructure::Full,
        CovarianceStructure::Tied,
        CovarianceStructure::Diagonal,
    ] {
        let spec = GaussianParams::with_structure(structure).check().unwrap();
        let sup = spec.fit(s.x_labeled.as_ref(), &s.y_labeled, 2).unwrap();
        let fit = SemiSupervisedEm::new(
            spec,
            EmParams {
                lambda: Lambda::Fixed(0.0),
                ..Default::default()
            },
        )
        .unwrap()
        .fit(
            s.x_labeled.as_ref(),
            &s.y_labeled,
            2,
            s.x_unlabeled.as_ref(),
        )
        .unwrap();
        assert_eq!(fit.model.components(), &sup);
        assert!(fit.report.converged);
    }
}

#[test]
fn no_unlabeled_rows_is_the_supervised_fit_reported_as_such() {
    let s = seed000(1, 10);
    let empty = Mat::<f64>::zeros(0, 2);
    let fit = SemiSupervisedEm::new(qda(), EmParams::default())
        .unwrap()
        .fit(s.x_labeled.as_ref(), &s.y_labeled, 2, empty.as_ref())
        .unwrap();
    assert!(fit.report.supervised_only && fit.report.diagnostic.is_none());
    assert_eq!(
        fit.model.components(),
        &qda().fit(s.x_labeled.as_ref(), &s.y_labeled, 2).unwrap()
    );
}

#[test]
fn bit_identical_on_one_and_two_threads() {
    let s = seed000(2, 10);
    let big = Mat::from_fn(12_000, 2, |i, j| {
        s.x_unlabeled[(i % s.x_unlabeled.nrows(), j)] + (i / s.x_unlabeled.nrows()) as f64 * 1e-3
    });
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                let a = SemiSupervisedEm::new(qda(), EmParams::default())
                    .unwrap()
                    .fit(s.x_labeled.as_ref(), &s.y_labeled, 2, big.as_ref())
                    .unwrap();
                let b = SemiSupervisedEm::new(
                    qda(),
                    EmParams {
                        lambda: Lambda::Auto(CvOptions::default()),
                        components: Components::Uniform(2),
                        ..Default::default()
                    },
                )
                .unwrap()
                .fit(
                    s.x_labeled.as_ref(),
                    &s.y_labeled,
                    2,
                    s.x_unlabeled.as_ref(),
                )
                .unwrap();
                serde_json::to_string(&(&a.model, &a.report, &b.model, &b.report)).unwrap()
            })
    };
    assert_eq!(run(1), run(2));
}

#[test]
fn invariant_under_row_permutation_and_class_relabelling() {
    let s = seed000(4, 10);
    let base = fit_qda(&s, EmParams::default());
    // Reverse the unlabeled rows.
    let n = s.x_unlabeled.nrows();
    let rev = Mat::from_fn(n, 2, |i, j| s.x_unlabeled[(n - 1 - i, j)]);
    let perm = SemiSupervisedEm::new(qda(), EmParams::default())
        .unwrap()
        .fit(s.x_labeled.as_ref(), &s.y_labeled, 2, rev.as_ref())
        .unwrap();
    let (ma, mb) = (
        base.model.components().means(),
        perm.model.components().means(),
    );
    for k in 0..2 {
        for j in 0..2 {
            assert!((ma[(k, j)] - mb[(k, j)]).abs() < 1e-8);
        }
    }
    // Swap the class labels: the parameters swap.
    let swapped: Vec<usize> = s.y_labeled.iter().map(|y| 1 - y).collect();
    let sw = SemiSupervisedEm::new(qda(), EmParams::default())
        .unwrap()
        .fit(s.x_labeled.as_ref(), &swapped, 2, s.x_unlabeled.as_ref())
        .unwrap();
    let mc = sw.model.components().means();
    for k in 0..2 {
        for j in 0..2 {
            assert!((ma[(k, j)] - mc[(1 - k, j)]).abs() < 1e-8);
        }
    }
    assert!(
        (base.report.objective - sw.report.objective).abs() < 1e-8 * base.report.objective.abs()
    );
}

#[test]
fn hard_em_converges_and_observer_sees_every_iteration() {
    let s = seed000(5, 10);
    let mut seen = Vec::new();
    let fit = SemiSupervisedEm::new(
        qda(),
        EmParams {
            mode: EmMode::Hard,
            ..Default::default()
        },
    )
    .unwrap()
    .fit_with_observer(
        s.x_labeled.as_ref(),
        &s.y_labeled,
        2,
        s.x_unlabeled.as_ref(),
        &mut |r| seen.push(r.iteration),
    )
    .unwrap();
    assert!(fit.report.converged);
    assert_eq!(seen, (0..=fit.report.iterations).collect::<Vec<_>>());
    for w in fit.report.trace.windows(2) {
        assert!(w[1].objective >= w[0].objective - 1e-9 * w[0].objective.abs());
    }
    let shares = &fit.report.trace.last().unwrap().class_weights;
    assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    // Hard assignments bias heavily overlapping classes (seed 000), so judge accuracy where the
    // classes are separated: Δ = 4, Bayes accuracy Φ(2) = 0.977.
    let sep = shared_covariance(5, 2, 4.0, 10, 1000, 1000);
    let fit = SemiSupervisedEm::new(
        qda(),
        EmParams {
            mode: EmMode::Hard,
            ..Default::default()
        },
    )
    .unwrap()
    .fit(
        sep.x_labeled.as_ref(),
        &sep.y_labeled,
        2,
        sep.x_unlabeled.as_ref(),
    )
    .unwrap();
    let acc = accuracy(
        &fit.model.predict(sep.x_test.as_ref()).unwrap(),
        &sep.y_test,
    );
    assert!(fit.report.converged && acc > 0.95, "{acc}");
}

#[test]
fn max_iter_is_reported_not_an_error() {
    let s = seed000(0, 10);
    let fit = fit_qda(
        &s,
        EmParams {
            max_iter: 2,
            tol: 0.0,
            ..Default::default()
        },
    );
    assert!(!fit.report.converged);
    assert_eq!(fit.report.iterations, 2);
    assert_eq!(fit.report.trace.len(), 3);
}

#[test]
fn works_for_naive_bayes_on_documents() {
    let s = documents(1, 3, 60, 40, 3, 300, 200);
    let spec = MultinomialNbParams::default().check().unwrap();
    let sup = spec.fit(s.x_labeled.as_ref(), &s.y_labeled, 3).unwrap();
    let fit = SemiSupervisedEm::new(spec, EmParams::default())
        .unwrap()
        .fit(
            s.x_labeled.as_ref(),
            &s.y_labeled,
            3,
            s.x_unlabeled.as_ref(),
        )
        .unwrap();
    let a_sup = accuracy(&sup.predict(s.x_test.as_ref()).unwrap(), &s.y_test);
    let a_ssl = accuracy(&fit.model.predict(s.x_test.as_ref()).unwrap(), &s.y_test);
    assert!(a_ssl >= a_sup, "{a_ssl} vs {a_sup}");
    let bspec = BernoulliNbParams::default().check().unwrap();
    let bfit = SemiSupervisedEm::new(bspec, EmParams::default())
        .unwrap()
        .fit(
            s.x_labeled.as_ref(),
            &s.y_labeled,
            3,
            s.x_unlabeled.as_ref(),
        )
        .unwrap();
    assert!(bfit.report.converged);
}

#[test]
fn bad_inputs_are_clear_errors() {
    let s = seed000(0, 10);
    let em = SemiSupervisedEm::new(qda(), EmParams::default()).unwrap();
    let none = Mat::<f64>::zeros(0, 2);
    assert!(matches!(
        em.fit(none.as_ref(), &[], 2, s.x_unlabeled.as_ref()),
        Err(EmError::NoLabeledRows)
    ));
    let only0 = vec![0; s.y_labeled.len()];
    assert!(matches!(
        em.fit(s.x_labeled.as_ref(), &only0, 2, s.x_unlabeled.as_ref()),
        Err(EmError::ClassWithoutLabels { class: 1 })
    ));
    let wide = Mat::<f64>::zeros(5, 3);
    assert!(matches!(
        em.fit(s.x_labeled.as_ref(), &s.y_labeled, 2, wide.as_ref()),
        Err(EmError::DimensionMismatch { .. })
    ));
    let e = SemiSupervisedEm::new(
        qda(),
        EmParams {
            lambda: Lambda::Fixed(1.5),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "`lambda` must be in [0, 1], got 1.5");
    let mut one_each = s.y_labeled.clone();
    one_each
        .iter_mut()
        .enumerate()
        .for_each(|(i, y)| *y = usize::from(i != 0));
    let e = SemiSupervisedEm::new(qda(), auto())
        .unwrap()
        .fit(s.x_labeled.as_ref(), &one_each, 2, s.x_unlabeled.as_ref())
        .unwrap_err();
    assert!(matches!(
        e,
        EmError::TooFewForCrossValidation { class: 0, count: 1 }
    ));
}

#[test]
fn a_collapsing_component_stops_with_a_warning_not_nan() {
    // Five components per class on 10 labeled rows and a handful of unlabeled ones: QDA components
    // with ≤ 2 points are singular, so an M-step fails; EM must stop with a warning.
    let s = seed000(6, 10);
    let few = Mat::from_fn(6, 2, |i, j| s.x_unlabeled[(i, j)]);
    let r = SemiSupervisedEm::new(
        qda(),
        EmParams {
            components: Components::Uniform(5),
            ..Default::default()
        },
    )
    .unwrap()
    .fit(s.x_labeled.as_ref(), &s.y_labeled, 2, few.as_ref());
    match r {
        Ok(fit) => {
            assert!(!fit.report.warnings.is_empty());
            assert!(fit.report.objective.is_finite());
        }
        Err(e) => assert!(e.to_string().contains("reg"), "{e}"),
    }
}

#[test]
fn non_finite_unlabeled_rows_are_errors_on_every_path() {
    // EM checks the rows once and trusts them afterwards; the one check must still happen,
    // with one or several components per class (the k-means start fits before any E-step).
    let mut s = two_clusters_per_class(3, 10, 1000);
    s.x_unlabeled[(1_500, 1)] = f64::NAN;
    for components in [Components::Uniform(1), Components::Uniform(2)] {
        let err = try_fit_qda(
            &s,
            EmParams {
                components,
                ..Default::default()
            },
        )
        .expect_err("NaN in the unlabeled rows must be an error");
        assert!(
            matches!(
                err,
                EmError::Model(GenerativeError::NonFiniteInput {
                    row: 1_500,
                    col: 1,
                    ..
                })
            ),
            "{err:?}"
        );
    }
}

/// The objective EM reports is L(θ) of the model it returns, recomputed here from that model's
/// log joints: Σ_L ln p(x, y) + λ Σ_U ln p(x) (soft), or λ Σ_U max_c ln p(x, c) over the
/// components (hard). A shared covariance's E-step scores the rows without their quadratic
/// term and adds its sum back from each set's moments; every structure, soft and hard, one
/// and two components per class, rows near the origin and 1e4 from it.
#[test]
fn the_reported_objective_is_that_of_the_returned_model() {
    use CovarianceStructure::*;
    let (xl0, yl, xu0) = random_problem(17, 30, 500, 3);
    for offset in [0.0, 1e4] {
        let shift = |m: &Mat<f64>| Mat::from_fn(m.nrows(), 2, |i, j| m[(i, j)] + offset);
        let (xl, xu) = (shift(&xl0), shift(&xu0));
        for s in [Full, Tied, Diagonal, Spherical, TiedDiagonal] {
            for (mode, per_class) in [(EmMode::Soft, 1), (EmMode::Hard, 1), (EmMode::Soft, 2)] {
                let spec = GaussianParams::with_structure(s).check().unwrap();
                let lambda = 0.6;
                let params = EmParams {
                    lambda: Lambda::Fixed(lambda),
                    mode,
                    max_iter: 5,
                    tol: 0.0,
                    components: Components::Uniform(per_class),
                    ..Default::default()
                };
                let fit = SemiSupervisedEm::new(spec, params)
                    .unwrap()
                    .fit(xl.as_ref(), &yl, 3, xu.as_ref())
                    .unwrap();
                let at = format!("{s:?}, {mode:?}, {per_class} per class, offset {offset}");
                assert_eq!(fit.report.iterations, 5, "{at}");
                let last = fit.report.trace.last().unwrap();
                let lj_l = fit.model.log_joint(xl.as_ref()).unwrap();
                let labeled: f64 = (0..xl.nrows()).map(|i| lj_l[(i, yl[i])]).sum();
                let unlabeled = match mode {
                    EmMode::Soft => fit.model.log_likelihood(xu.as_ref()).unwrap(),
                    EmMode::Hard => {
                        let lj = fit.model.components().log_joint(xu.as_ref()).unwrap();
                        (0..xu.nrows())
                            .map(|i| (0..lj.ncols()).map(|c| lj[(i, c)]).fold(f64::MIN, f64::max))
                            .sum()
                    }
                };
                let close = |a: f64, b: f64| (a - b).abs() <= 1e-10 * (1.0 + b.abs());
                assert!(
                    close(last.labeled, labeled),
                    "{at}: labeled {} against {labeled}",
                    last.labeled
                );
                assert!(
                    close(last.unlabeled, unlabeled),
                    "{at}: unlabeled {} against {unlabeled}",
                    last.unlabeled
                );
                assert!(
                    close(last.objective, labeled + lambda * unlabeled),
                    "{at}: objective"
                );
            }
        }
    }
}

/// Rows laid out row-major (as `ssl-cli` reads them from a CSV file) fit the model of the same
/// rows column-major, bit for bit: report, diagnostic and predictions included. The kernels copy
/// each chunk of other layouts column-major first; d = 9 takes the 8-column transpose and a
/// column after it, and 9,000 unlabeled rows three chunks, the last one short.
#[test]
fn row_major_rows_give_the_bits_of_column_major_rows() {
    let (d, k, n_l, n_u) = (9, 3, 300, 9_000);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(41);
    let mut draw = |n: usize| {
        let y: Vec<usize> = (0..n).map(|i| (i * 7) % k).collect();
        let x = Mat::from_fn(n, d, |i, j| {
            let z: f64 = StandardNormal.sample(&mut rng);
            z * (1.0 + 0.1 * j as f64) + (y[i] * (j % 3 + 1)) as f64
        });
        (x, y)
    };
    let ((xl, yl), (xu, _)) = (draw(n_l), draw(n_u));
    let counts = |x: &Mat<f64>| Mat::from_fn(x.nrows(), d, |i, j| x[(i, j)].abs().round());
    let (cl, cu) = (counts(&xl), counts(&xu));
    /// The fit and its predictions of the unlabeled rows, serialised, from the rows as given
    /// and from row-major copies.
    fn both<S: WeightedFit>(
        spec: S,
        xl: &Mat<f64>,
        yl: &[usize],
        xu: &Mat<f64>,
        k: usize,
    ) -> [String; 2]
    where
        S::Model: serde::Serialize,
    {
        let (xl_rows, xu_rows) = (xl.transpose().to_owned(), xu.transpose().to_owned());
        let em = SemiSupervisedEm::new(spec, EmParams::default()).unwrap();
        [
            (xl.as_ref(), xu.as_ref()),
            (xl_rows.transpose(), xu_rows.transpose()),
        ]
        .map(|(l, u)| {
            let fit = em.fit(l, yl, k, u).unwrap();
            let proba = fit.model.predict_proba(u).unwrap();
            let bits: Vec<u64> = (0..proba.ncols())
                .flat_map(|c| proba.col(c).iter().map(|v| v.to_bits()).collect::<Vec<_>>())
                .collect();
            serde_json::to_string(&(&fit.model, &fit.report, bits)).unwrap()
        })
    }
    for s in [
        CovarianceStructure::Full,
        CovarianceStructure::Tied,
        CovarianceStructure::Diagonal,
    ] {
        let spec = GaussianParams::with_structure(s).check().unwrap();
        let [a, b] = both(spec, &xl, &yl, &xu, k);
        assert!(a == b, "{s:?}: row-major rows fit another model");
    }
    let [a, b] = both(
        MultinomialNbParams::default().check().unwrap(),
        &cl,
        &yl,
        &cu,
        k,
    );
    assert!(a == b, "multinomial NB: row-major rows fit another model");
    let [a, b] = both(
        BernoulliNbParams::default().check().unwrap(),
        &cl,
        &yl,
        &cu,
        k,
    );
    assert!(a == b, "Bernoulli NB: row-major rows fit another model");
}

/// The mixture's posteriors are its model's: with one component per class they are the model's
/// own bits (for LDA, through its linear discriminant), and with several they are the classes'
/// log-sum-exp of the components' scores. A row far beyond the data, whose quadratic form
/// overflows for every class, keeps LDA's one-hot posterior instead of becoming uniform.
#[test]
fn mixtures_use_their_models_posterior_scores() {
    let s = seed000(2, 10);
    let lda = GaussianParams::with_structure(CovarianceStructure::Tied)
        .check()
        .unwrap();
    let em = |params: EmParams| {
        SemiSupervisedEm::new(lda.clone(), params)
            .unwrap()
            .fit(
                s.x_labeled.as_ref(),
                &s.y_labeled,
                2,
                s.x_unlabeled.as_ref(),
            )
            .unwrap()
    };
    let one = em(EmParams::default());
    let x = s.x_test.as_ref();
    let bare = one.model.components();
    assert_eq!(
        one.model.predict_proba(x).unwrap(),
        bare.predict_proba(x).unwrap()
    );
    // Far along the line between the class means, on either side: one-hot for the nearer mean.
    let means = bare.means();
    let far = Mat::from_fn(2, 2, |i, j| {
        let direction = means[(1, j)] - means[(0, j)];
        if i == 0 {
            1e200 * direction
        } else {
            -1e200 * direction
        }
    });
    let p = one.model.predict_proba(far.as_ref()).unwrap();
    assert_eq!((p[(0, 1)], p[(0, 0)]), (1.0, 0.0), "{p:?}");
    assert_eq!((p[(1, 0)], p[(1, 1)]), (1.0, 0.0), "{p:?}");
    assert_eq!(one.model.predict(far.as_ref()).unwrap(), vec![1, 0]);

    let two = em(EmParams {
        components: Components::Uniform(2),
        ..Default::default()
    });
    let p = two.model.predict_proba(x).unwrap();
    let joints = two.model.components().log_joint(x).unwrap();
    for i in 0..x.nrows() {
        let class = |k: usize| {
            let (a, b) = (joints[(i, 2 * k)], joints[(i, 2 * k + 1)]);
            a.max(b) + (-(a - b).abs()).exp().ln_1p()
        };
        let (j0, j1) = (class(0), class(1));
        let p1 = 1.0 / (1.0 + (j0 - j1).exp());
        assert!(
            (p[(i, 1)] - p1).abs() < 1e-12,
            "row {i}: {} vs {p1}",
            p[(i, 1)]
        );
    }
    // Far out, the component whose mean has the largest μ_cᵀ Σ⁻¹ x takes everything.
    let components = two.model.components();
    let l = components.cholesky(0);
    let p = two.model.predict_proba(far.as_ref()).unwrap();
    for i in 0..2 {
        // Σ⁻¹ x by the two triangular solves of Σ = L Lᵀ.
        let z0 = far[(i, 0)] / l[(0, 0)];
        let z1 = (far[(i, 1)] - l[(1, 0)] * z0) / l[(1, 1)];
        let y1 = z1 / l[(1, 1)];
        let y0 = (z0 - l[(1, 0)] * y1) / l[(0, 0)];
        let m = components.means();
        let best = (0..4)
            .max_by(|&a, &b| {
                let score = |c: usize| m[(c, 0)] * y0 + m[(c, 1)] * y1;
                score(a).total_cmp(&score(b))
            })
            .unwrap();
        let class = two.model.component_class()[best];
        assert_eq!(p[(i, class)], 1.0, "row {i}: {p:?}");
    }

    // Bad rows are still named, with one component per class and with several.
    let mut bad = s.x_test.clone();
    bad[(7, 1)] = f64::NAN;
    for e in [
        one.model.predict_proba(bad.as_ref()).unwrap_err(),
        two.model.predict_proba(bad.as_ref()).unwrap_err(),
    ] {
        assert!(e.to_string().contains("row 7"), "{e}");
    }
}

/// Components are kept sorted by class: with one component per class they are read as the
/// classes in order, so a model that lists them otherwise is rejected, not misread.
#[test]
fn mixtures_reject_unsorted_component_classes() {
    let s = seed000(2, 10);
    let model = qda().fit(s.x_labeled.as_ref(), &s.y_labeled, 2).unwrap();
    assert!(ComponentMixture::new(model.clone(), vec![0, 1], 2).is_ok());
    let e = ComponentMixture::new(model, vec![1, 0], 2).unwrap_err();
    assert!(e.to_string().contains("component_class"), "{e}");
}
