//! Seeded k-means++ used to split a class into several components before EM starts.
//!
//! With one component per class EM starts from the labeled-only fit. With m_k > 1, each class's
//! labeled rows are split by k-means into m_k groups (adding the unlabeled rows the labeled-only
//! model gives that class when it has fewer labeled rows than components); every unlabeled row
//! then starts in the component with the nearest centre. Labeled rows anchor the components, so
//! a weak labeled-only classifier does not decide the starting point.

use faer::MatRef;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Cluster index in `0..m` for each of `rows` (each a row of one of the matrices in `sets`, as
/// (set, row)), by k-means++ seeding and up to 50 Lloyd iterations. Deterministic for a seed.
pub fn kmeans(
    sets: &[MatRef<'_, f64>],
    rows: &[(usize, usize)],
    m: usize,
    seed: u64,
) -> (Vec<usize>, Vec<Vec<f64>>) {
    let n = rows.len();
    if n == 0 {
        return (Vec::new(), Vec::new());
    }
    let d = sets[0].ncols();
    let x = |(s, i): (usize, usize), j: usize| sets[s][(i, j)];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dist2 =
        |i: (usize, usize), c: &[f64]| -> f64 { (0..d).map(|j| (x(i, j) - c[j]).powi(2)).sum() };
    let first = rows[rng.random_range(0..n)];
    let mut centres: Vec<Vec<f64>> = vec![(0..d).map(|j| x(first, j)).collect()];
    let mut nearest: Vec<f64> = rows.iter().map(|&i| dist2(i, &centres[0])).collect();
    while centres.len() < m.min(n) {
        let total: f64 = nearest.iter().sum();
        let pick = if total > 0.0 {
            let mut u = rng.random::<f64>() * total;
            let mut idx = n - 1;
            for (p, w) in nearest.iter().enumerate() {
                if u < *w {
                    idx = p;
                    break;
                }
                u -= w;
            }
            idx
        } else {
            rng.random_range(0..n)
        };
        let c: Vec<f64> = (0..d).map(|j| x(rows[pick], j)).collect();
        for (p, &i) in rows.iter().enumerate() {
            nearest[p] = nearest[p].min(dist2(i, &c));
        }
        centres.push(c);
    }
    let k = centres.len();
    let mut assign = vec![0; n];
    for _ in 0..50 {
        let mut changed = false;
        for (p, &i) in rows.iter().enumerate() {
            let best = (0..k)
                .min_by(|a, b| dist2(i, &centres[*a]).total_cmp(&dist2(i, &centres[*b])))
                .unwrap_or(0);
            if best != assign[p] {
                assign[p] = best;
                changed = true;
            }
        }
        let mut sums = vec![vec![0.0; d]; k];
        let mut counts = vec![0usize; k];
        for (p, &i) in rows.iter().enumerate() {
            counts[assign[p]] += 1;
            for j in 0..d {
                sums[assign[p]][j] += x(i, j);
            }
        }
        for c in 0..k {
            if counts[c] > 0 {
                centres[c] = sums[c].iter().map(|s| s / counts[c] as f64).collect();
            }
        }
        if !changed {
            break;
        }
    }
    (assign, centres)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separates_two_obvious_clusters_deterministically() {
        let x = faer::Mat::from_fn(40, 2, |i, j| {
            if i < 20 {
                (i + j) as f64 * 0.01
            } else {
                10.0 + (i * j) as f64 * 0.01
            }
        });
        let rows: Vec<(usize, usize)> = (0..40).map(|i| (0, i)).collect();
        let (a, centres) = kmeans(&[x.as_ref()], &rows, 2, 7);
        assert_eq!(centres.len(), 2);
        assert!(
            a[..20].iter().all(|v| *v == a[0])
                && a[20..].iter().all(|v| *v == a[20])
                && a[0] != a[20]
        );
        assert_eq!(a, kmeans(&[x.as_ref()], &rows, 2, 7).0);
    }
}
