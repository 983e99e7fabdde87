//! Test support: one matrix in every layout the kernels read differently.

use faer::{Mat, MatRef};

/// Copies of an n × d matrix for the row-major view and the view with row stride −1 (neither
/// rows nor columns contiguous, the generic path).
pub(crate) struct Layouts {
    row_major: Vec<f64>,
    reversed: Mat<f64>,
}

impl Layouts {
    pub(crate) fn new(x: MatRef<'_, f64>) -> Self {
        let (n, d) = (x.nrows(), x.ncols());
        Self {
            row_major: (0..n)
                .flat_map(|i| (0..d).map(move |j| (i, j)))
                .map(|(i, j)| x[(i, j)])
                .collect(),
            reversed: Mat::from_fn(n, d, |i, j| x[(n - 1 - i, j)]),
        }
    }

    /// `x` itself, then the same values row-major, then with row stride −1.
    pub(crate) fn views<'a>(&'a self, x: MatRef<'a, f64>) -> [MatRef<'a, f64>; 3] {
        [
            x,
            MatRef::from_row_major_slice(&self.row_major, x.nrows(), x.ncols()),
            self.reversed.as_ref().reverse_rows(),
        ]
    }
}
