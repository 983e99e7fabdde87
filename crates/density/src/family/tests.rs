//! Each family's direct formula against its exponential-family form, normalisation, MLE
//! recovery from large samples, and typed errors for invalid parameters.

use super::*;
use crate::{DensityError, MultivariateNormal};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::Distribution;

fn assert_forms_agree<F: ExponentialFamily>(f: &F, points: &[Vec<f64>]) {
    for x in points {
        let direct = f.log_pdf(x).unwrap();
        let natural = f.log_pdf_natural(x).unwrap();
        if direct == f64::NEG_INFINITY {
            assert_eq!(natural, f64::NEG_INFINITY, "{} at {x:?}", F::NAME);
        } else {
            assert!(
                (direct - natural).abs() < 1e-10 * (1.0 + direct.abs()),
                "{} at {x:?}: direct {direct}, natural {natural}",
                F::NAME
            );
        }
    }
}

#[test]
fn direct_and_natural_forms_agree() {
    let grid: Vec<Vec<f64>> = (-40..=40).map(|i| vec![i as f64 * 0.25]).collect();
    let counts: Vec<Vec<f64>> = (0..60).map(|i| vec![i as f64]).collect();
    assert_forms_agree(&Gaussian::new(1.5, 0.7).unwrap(), &grid);
    assert_forms_agree(&Exponential::new(2.5).unwrap(), &grid);
    assert_forms_agree(&Poisson::new(3.7).unwrap(), &counts);
    assert_forms_agree(
        &Categorical::new(vec![0.2, 0.5, 0.3]).unwrap(),
        &counts[..5],
    );
    let bits: Vec<Vec<f64>> = (0..8)
        .map(|m| (0..3).map(|j| ((m >> j) & 1) as f64).collect())
        .collect();
    assert_forms_agree(&Bernoulli::new(vec![0.1, 0.5, 0.93]).unwrap(), &bits);
    let docs: Vec<Vec<f64>> = (0..30)
        .map(|i| vec![(i % 4) as f64, (i % 7) as f64, (i / 5) as f64])
        .collect();
    assert_forms_agree(&Multinomial::new(vec![0.25, 0.6, 0.15]).unwrap(), &docs);
    let mvn =
        MultivariateNormal::full(vec![1.0, -2.0], faer::mat![[2.0, 0.3], [0.3, 0.5]].as_ref())
            .unwrap();
    let pts: Vec<Vec<f64>> = (0..50)
        .map(|i| vec![(i as f64 * 0.3).sin() * 3.0, (i as f64 * 0.7).cos() * 2.0])
        .collect();
    assert_forms_agree(&mvn, &pts);
}

#[test]
fn densities_integrate_or_sum_to_one() {
    // Trapezoid on a wide grid for the continuous families.
    let g = Gaussian::new(0.4, 2.0).unwrap();
    let h = 1e-3;
    let gauss: f64 = (0..40_000)
        .map(|i| g.log_pdf(&[-20.0 + i as f64 * h]).unwrap().exp() * h)
        .sum();
    assert!((gauss - 1.0).abs() < 1e-9, "{gauss}");
    let e = Exponential::new(1.3).unwrap();
    let expo: f64 = (0..40_000)
        .map(|i| {
            let x = i as f64 * h;
            let w = if i == 0 { 0.5 } else { 1.0 };
            w * e.log_pdf(&[x]).unwrap().exp() * h
        })
        .sum();
    assert!((expo - 1.0).abs() < 1e-6, "{expo}");
    let p = Poisson::new(6.5).unwrap();
    let pois: f64 = (0..200)
        .map(|k| p.log_pdf(&[k as f64]).unwrap().exp())
        .sum();
    assert!((pois - 1.0).abs() < 1e-12);
    let b = Bernoulli::new(vec![0.1, 0.5, 0.93, 0.3]).unwrap();
    let bern: f64 = (0..16)
        .map(|m| {
            let x: Vec<f64> = (0..4).map(|j| ((m >> j) & 1) as f64).collect();
            b.log_pdf(&x).unwrap().exp()
        })
        .sum();
    assert!((bern - 1.0).abs() < 1e-12);
    // All compositions of n = 6 into 3 parts.
    let m = Multinomial::new(vec![0.2, 0.5, 0.3]).unwrap();
    let mut multi = 0.0;
    for a in 0..=6 {
        for b in 0..=(6 - a) {
            multi += m
                .log_pdf(&[a as f64, b as f64, (6 - a - b) as f64])
                .unwrap()
                .exp();
        }
    }
    assert!((multi - 1.0).abs() < 1e-12);
}

fn fit<F: ExponentialFamily>(proto: &F, xs: &[Vec<f64>], opts: &MleOptions) -> F {
    let mut st = proto.empty_stats();
    for x in xs {
        F::accumulate(&mut st, x, 1.0).unwrap();
    }
    F::mle(&st, opts).unwrap()
}

#[test]
fn mle_recovers_parameters_from_large_samples() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let n = 200_000;
    let opts = MleOptions::default();
    let normal = rand_distr::Normal::new(3.0, 1.5).unwrap();
    let xs: Vec<Vec<f64>> = (0..n).map(|_| vec![normal.sample(&mut rng)]).collect();
    let g = fit(&Gaussian::new(0.0, 1.0).unwrap(), &xs, &opts);
    assert!((g.mean() - 3.0).abs() < 0.01 && (g.variance() - 2.25).abs() < 0.02);

    let exp = rand_distr::Exp::new(0.8).unwrap();
    let xs: Vec<Vec<f64>> = (0..n).map(|_| vec![exp.sample(&mut rng)]).collect();
    let e = fit(&Exponential::new(1.0).unwrap(), &xs, &opts);
    assert!((e.rate() - 0.8).abs() < 0.01);

    let pois = rand_distr::Poisson::new(4.2).unwrap();
    let xs: Vec<Vec<f64>> = (0..n).map(|_| vec![pois.sample(&mut rng)]).collect();
    let p = fit(&Poisson::new(1.0).unwrap(), &xs, &opts);
    assert!((p.rate() - 4.2).abs() < 0.02);

    let probs = [0.1, 0.6, 0.3];
    let cat = rand_distr::weighted::WeightedIndex::new(probs).unwrap();
    let xs: Vec<Vec<f64>> = (0..n).map(|_| vec![cat.sample(&mut rng) as f64]).collect();
    let c = fit(&Categorical::new(vec![1.0 / 3.0; 3]).unwrap(), &xs, &opts);
    for (a, b) in c.probs().iter().zip(probs) {
        assert!((a - b).abs() < 0.005);
    }
    // Multinomial: 20 draws from the categorical per document.
    let docs: Vec<Vec<f64>> = (0..20_000)
        .map(|_| {
            let mut v = vec![0.0; 3];
            for _ in 0..20 {
                v[cat.sample(&mut rng)] += 1.0;
            }
            v
        })
        .collect();
    let m = fit(&Multinomial::new(vec![1.0 / 3.0; 3]).unwrap(), &docs, &opts);
    for (a, b) in m.probs().iter().zip(probs) {
        assert!((a - b).abs() < 0.005);
    }
    let bp = [0.2, 0.7];
    let xs: Vec<Vec<f64>> = (0..n)
        .map(|_| {
            bp.iter()
                .map(|p| {
                    f64::from(u8::from(
                        rand_distr::Bernoulli::new(*p).unwrap().sample(&mut rng),
                    ))
                })
                .collect()
        })
        .collect();
    let b = fit(&Bernoulli::new(vec![0.5, 0.5]).unwrap(), &xs, &opts);
    for (a, p) in b.probs().iter().zip(bp) {
        assert!((a - p).abs() < 0.005);
    }
    let truth =
        MultivariateNormal::full(vec![1.0, 2.0], faer::mat![[1.0, 0.5], [0.5, 2.0]].as_ref())
            .unwrap();
    let xs = truth.sample(&mut rng, n);
    let rows: Vec<Vec<f64>> = (0..n).map(|i| vec![xs[(i, 0)], xs[(i, 1)]]).collect();
    let est = fit(&truth, &rows, &opts);
    assert!((&est.covariance() - &truth.covariance()).norm_l2() < 0.03);
}

#[test]
fn lidstone_smoothing_avoids_zero_probabilities() {
    let proto = Bernoulli::new(vec![0.5, 0.5]).unwrap();
    let mut st = proto.empty_stats();
    for _ in 0..5 {
        Bernoulli::accumulate(&mut st, &[1.0, 0.0], 1.0).unwrap();
    }
    assert!(matches!(
        Bernoulli::mle(&st, &MleOptions::default()),
        Err(DensityError::DegenerateEstimate { .. })
    ));
    let smoothed = Bernoulli::mle(
        &st,
        &MleOptions {
            pseudo_count: 1.0,
            variance_floor: 0.0,
        },
    )
    .unwrap();
    assert_eq!(smoothed.probs(), &[6.0 / 7.0, 1.0 / 7.0]);
}

#[test]
fn invalid_parameters_and_observations_are_typed_errors() {
    assert!(matches!(
        Gaussian::new(0.0, -1.0),
        Err(DensityError::OutOfRange { .. })
    ));
    assert!(matches!(
        Gaussian::new(f64::NAN, 1.0),
        Err(DensityError::NotFinite { .. })
    ));
    assert!(matches!(
        Bernoulli::new(vec![0.5, -0.1]),
        Err(DensityError::OutOfRange { .. })
    ));
    assert!(matches!(
        Bernoulli::new(vec![f64::NAN]),
        Err(DensityError::NotFinite { .. })
    ));
    assert!(matches!(
        Categorical::new(vec![0.5, 0.6]),
        Err(DensityError::NotNormalised { .. })
    ));
    assert!(matches!(
        Multinomial::new(vec![]),
        Err(DensityError::DimensionMismatch { .. })
    ));
    assert!(Poisson::new(0.0).is_err() && Exponential::new(f64::INFINITY).is_err());
    let b = Bernoulli::new(vec![0.5, 0.5]).unwrap();
    assert!(matches!(
        b.log_pdf(&[1.0]),
        Err(DensityError::DimensionMismatch { .. })
    ));
    assert!(matches!(
        b.log_pdf(&[1.0, f64::NAN]),
        Err(DensityError::NotFinite { .. })
    ));
    assert_eq!(b.log_pdf(&[1.0, 0.5]).unwrap(), f64::NEG_INFINITY);
    let mut st = b.empty_stats();
    assert!(matches!(
        Bernoulli::accumulate(&mut st, &[2.0, 0.0], 1.0),
        Err(DensityError::OutsideSupport { .. })
    ));
    assert!(matches!(
        Bernoulli::accumulate(&mut st, &[1.0, 0.0], -1.0),
        Err(DensityError::OutOfRange { .. })
    ));
    let mut st = Poisson::new(1.0).unwrap().empty_stats();
    assert!(Poisson::accumulate(&mut st, &[1.5], 1.0).is_err());
    let mut st = Multinomial::new(vec![0.5, 0.5]).unwrap().empty_stats();
    assert!(Multinomial::accumulate(&mut st, &[-1.0, 2.0], 1.0).is_err());
    let st = Gaussian::new(0.0, 1.0).unwrap().empty_stats();
    assert!(matches!(
        Gaussian::mle(&st, &MleOptions::default()),
        Err(DensityError::ZeroWeight { .. })
    ));
}
