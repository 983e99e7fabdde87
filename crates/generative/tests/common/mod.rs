//! Shared helpers for the generative integration tests: load the repository's CSV datasets.

#![allow(clippy::unwrap_used)]

use faer::Mat;

/// (X, class index per row, class names sorted) from `data/<name>.csv` (last column = label).
pub fn load(name: &str) -> (Mat<f64>, Vec<usize>, Vec<String>) {
    let path = format!("{}/../../data/{name}.csv", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let d = rows[0].len() - 1;
    let mut classes: Vec<String> = rows.iter().map(|r| r[d].to_string()).collect();
    classes.sort();
    classes.dedup();
    let x = Mat::from_fn(rows.len(), d, |i, j| rows[i][j].parse::<f64>().unwrap());
    let y = rows
        .iter()
        .map(|r| classes.iter().position(|c| c == r[d]).unwrap())
        .collect();
    (x, y, classes)
}

/// Largest absolute difference between two equally shaped matrices.
pub fn max_abs_diff(a: faer::MatRef<'_, f64>, b: faer::MatRef<'_, f64>) -> f64 {
    assert_eq!((a.nrows(), a.ncols()), (b.nrows(), b.ncols()));
    let mut m = 0.0f64;
    for j in 0..a.ncols() {
        for i in 0..a.nrows() {
            m = m.max((a[(i, j)] - b[(i, j)]).abs());
        }
    }
    m
}
