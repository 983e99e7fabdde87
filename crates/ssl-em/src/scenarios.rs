//! Synthetic semi-supervised problems with known truth, from a seed.
//!
//! These back the tests, the CLI's `demo` and `cargo xtask reproduce`: each draws labeled rows,
//! unlabeled rows (with their hidden true classes) and an independent test set.

use faer::Mat;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Bernoulli, Distribution, Normal, StandardNormal};

use density::MultivariateNormal;

/// A semi-supervised problem with known classes everywhere.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub x_labeled: Mat<f64>,
    pub y_labeled: Vec<usize>,
    pub x_unlabeled: Mat<f64>,
    /// Hidden true classes of the unlabeled rows (for scoring only).
    pub y_unlabeled: Vec<usize>,
    pub x_test: Mat<f64>,
    pub y_test: Vec<usize>,
    pub n_classes: usize,
}

/// Draws `n` rows per class from per-class samplers, in class order.
fn draw<F: FnMut(usize, &mut ChaCha8Rng) -> Vec<f64>>(
    n_per_class: &[usize],
    d: usize,
    rng: &mut ChaCha8Rng,
    mut sample: F,
) -> (Mat<f64>, Vec<usize>) {
    let n: usize = n_per_class.iter().sum();
    let mut x = Mat::zeros(n, d);
    let mut y = Vec::with_capacity(n);
    let mut r = 0;
    for (k, &m) in n_per_class.iter().enumerate() {
        for _ in 0..m {
            let v = sample(k, rng);
            for j in 0..d {
                x[(r, j)] = v[j];
            }
            y.push(k);
            r += 1;
        }
    }
    (x, y)
}

/// Labeled and test rows from `task`, unlabeled rows from `unlabeled` (drawn in that order:
/// labeled, unlabeled, test), `per_class` = (labeled, unlabeled, test) rows per class.
fn assemble<F, G>(
    rng: &mut ChaCha8Rng,
    d: usize,
    n_classes: usize,
    per_class: (usize, usize, usize),
    mut task: F,
    unlabeled: G,
) -> Scenario
where
    F: FnMut(usize, &mut ChaCha8Rng) -> Vec<f64>,
    G: FnMut(usize, &mut ChaCha8Rng) -> Vec<f64>,
{
    let (x_labeled, y_labeled) = draw(&vec![per_class.0; n_classes], d, rng, &mut task);
    let (x_unlabeled, y_unlabeled) = draw(&vec![per_class.1; n_classes], d, rng, unlabeled);
    let (x_test, y_test) = draw(&vec![per_class.2; n_classes], d, rng, &mut task);
    Scenario {
        x_labeled,
        y_labeled,
        x_unlabeled,
        y_unlabeled,
        x_test,
        y_test,
        n_classes,
    }
}

fn mvn_sampler(
    dists: Vec<MultivariateNormal>,
) -> impl FnMut(usize, &mut ChaCha8Rng) -> Vec<f64> + Clone {
    move |k, rng| {
        let s = dists[k].sample(rng, 1);
        (0..s.ncols()).map(|j| s[(0, j)]).collect()
    }
}

/// The true class-conditional distributions of seed 000: class 0 ~ N((3, 1), I),
/// class 1 ~ N((2, 2), [[1, 0.5], [0.5, 1]]).
pub fn seed000_truth() -> [MultivariateNormal; 2] {
    let a = MultivariateNormal::full(vec![3.0, 1.0], faer::mat![[1.0, 0.0], [0.0, 1.0]].as_ref());
    let b = MultivariateNormal::full(vec![2.0, 2.0], faer::mat![[1.0, 0.5], [0.5, 1.0]].as_ref());
    match (a, b) {
        (Ok(a), Ok(b)) => [a, b],
        _ => unreachable!("constant covariances are positive definite"),
    }
}

/// Seed 000's experiment: 1000 points per class, `n_labeled` per class labeled, the rest
/// unlabeled; plus 1000 test points per class.
pub fn seed000(seed: u64, n_labeled: usize) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let truth = seed000_truth().to_vec();
    let sampler = mvn_sampler(truth);
    assemble(
        &mut rng,
        2,
        2,
        (n_labeled, 1000 - n_labeled, 1000),
        sampler.clone(),
        sampler,
    )
}

/// Two Gaussians with a shared covariance Σ and means ±δ/2 along the first axis, so that the
/// Mahalanobis distance is Δ = `delta` and the Bayes error is Φ(−Δ/2). `d` ≥ 1 dimensions.
pub fn shared_covariance(
    seed: u64,
    d: usize,
    delta: f64,
    n_labeled: usize,
    n_unlabeled: usize,
    n_test: usize,
) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Σ = I in whitened coordinates, then a fixed correlation in the first two axes.
    let mut cov = Mat::<f64>::identity(d, d);
    if d >= 2 {
        cov[(0, 1)] = 0.3;
        cov[(1, 0)] = 0.3;
    }
    // Mean difference m with mᵀ Σ⁻¹ m = Δ²: take m = Δ · L e₁ (so Σ⁻¹ m = Δ L⁻ᵀ e₁).
    let l = density::mvn::cholesky_lower(cov.as_ref()).unwrap_or_else(|_| Mat::identity(d, d));
    let shift: Vec<f64> = (0..d).map(|i| delta * l[(i, 0)] / 2.0).collect();
    let dist = |sign: f64| {
        MultivariateNormal::full(shift.iter().map(|s| sign * s).collect(), cov.as_ref())
    };
    let dists = match (dist(-1.0), dist(1.0)) {
        (Ok(a), Ok(b)) => vec![a, b],
        _ => unreachable!("the covariance is positive definite"),
    };
    let sampler = mvn_sampler(dists);
    assemble(
        &mut rng,
        d,
        2,
        (n_labeled, n_unlabeled, n_test),
        sampler.clone(),
        sampler,
    )
}

/// Seed 004's failure case: labeled and test rows from class 0 ~ N((0, 0), I) and class 1 ~
/// N((2.5, 0), I), but the unlabeled rows from shifted distributions (class 0 moved up by 4,
/// class 1 down by 4). A model fitted to the unlabeled rows is wrong for the task.
pub fn shifted_unlabeled(seed: u64, n_labeled: usize, n_unlabeled: usize) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let unit = |m: [f64; 2]| MultivariateNormal::spherical(m.to_vec(), 1.0);
    let make = |a: [f64; 2], b: [f64; 2]| match (unit(a), unit(b)) {
        (Ok(a), Ok(b)) => vec![a, b],
        _ => unreachable!("unit variance is valid"),
    };
    let task = make([0.0, 0.0], [2.5, 0.0]);
    let shifted = make([0.0, 4.0], [2.5, -4.0]);
    assemble(
        &mut rng,
        2,
        2,
        (n_labeled, n_unlabeled, 1000),
        mvn_sampler(task),
        mvn_sampler(shifted),
    )
}

/// Each class is two separated clusters along a line, alternating: class 0 at x = 0 and 8,
/// class 1 at x = 4 and 12 (unit variance, y ~ N(0, 1)). One Gaussian per class cannot fit
/// this; two per class can.
pub fn two_clusters_per_class(seed: u64, n_labeled: usize, n_unlabeled: usize) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let centres = [[0.0, 8.0], [4.0, 12.0]];
    let sample = |k: usize, rng: &mut ChaCha8Rng| {
        let pick = usize::from(Bernoulli::new(0.5).map(|b| b.sample(rng)).unwrap_or(false));
        let zx: f64 = StandardNormal.sample(rng);
        let zy: f64 = StandardNormal.sample(rng);
        vec![centres[k][pick] + zx, zy]
    };
    assemble(
        &mut rng,
        2,
        2,
        (n_labeled, n_unlabeled, 1000),
        sample,
        sample,
    )
}

/// Synthetic documents: `vocab` words, class-conditional word probabilities drawn from the seed
/// (each class favours its own quarter of the vocabulary), `doc_len` words per document.
/// Features are word counts (use `binarize` for presence/absence).
pub fn documents(
    seed: u64,
    n_classes: usize,
    vocab: usize,
    doc_len: usize,
    n_labeled: usize,
    n_unlabeled: usize,
    n_test: usize,
) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let noise = Normal::new(0.0, 1.0).unwrap_or_else(|_| unreachable!());
    let probs: Vec<Vec<f64>> = (0..n_classes)
        .map(|k| {
            let w: Vec<f64> = (0..vocab)
                .map(|v| {
                    let favoured = (v * n_classes / vocab) == k;
                    {
                        let z: f64 = noise.sample(&mut rng);
                        (z * 0.5 + if favoured { 1.0 } else { 0.0 }).exp()
                    }
                })
                .collect();
            let s: f64 = w.iter().sum();
            w.into_iter().map(|x| x / s).collect()
        })
        .collect();
    let words: Vec<rand_distr::weighted::WeightedIndex<f64>> = probs
        .iter()
        .map(|p| rand_distr::weighted::WeightedIndex::new(p).unwrap_or_else(|_| unreachable!()))
        .collect();
    let sample = |k: usize, rng: &mut ChaCha8Rng| {
        let mut counts = vec![0.0; vocab];
        for _ in 0..doc_len {
            counts[words[k].sample(rng)] += 1.0;
        }
        counts
    };
    assemble(
        &mut rng,
        vocab,
        n_classes,
        (n_labeled, n_unlabeled, n_test),
        &sample,
        &sample,
    )
}

/// Fraction of equal entries.
pub fn accuracy(pred: &[usize], truth: &[usize]) -> f64 {
    if truth.is_empty() {
        return 0.0;
    }
    pred.iter().zip(truth).filter(|(a, b)| a == b).count() as f64 / truth.len() as f64
}
