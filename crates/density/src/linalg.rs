//! faer's matrix kernels, wrapped so that the code after them runs at full speed.
//!
//! faer's AVX micro-kernels can return with the upper halves of the 256-bit registers still in
//! use. The rest of the workspace (and libm's `exp`/`ln`) is compiled for baseline x86-64, i.e.
//! legacy SSE instructions, and on the CPUs we measured every such instruction then pays a state
//! transition: `predict_proba` of multinomial naive Bayes at n = 1e6, d = 2, K = 2 spent 0.32 s,
//! three quarters of it in `exp`, and 0.028 s once the state was cleared after the product.
//! Every hot faer call therefore goes through this module, which issues `vzeroupper` after it.
//! The results are unchanged (the instruction only discards register halves nobody reads).

use faer::linalg::matmul;
use faer::linalg::triangular_solve;
use faer::mat::{AsMatMut, AsMatRef};
use faer::{Accum, MatMut, MatRef, Par};

/// Marks the upper halves of the AVX registers as unused (`vzeroupper`) when the CPU has AVX;
/// a no-op elsewhere.
#[inline]
pub fn clear_upper_simd_state() {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx") {
            // SAFETY: the instruction exists on every CPU with AVX, which was just checked, and
            // it changes no state that compiled Rust code relies on between statements (the
            // upper register halves are dead: no live value is held in them across this call).
            #[allow(unsafe_code)]
            unsafe {
                std::arch::x86_64::_mm256_zeroupper();
            }
        }
    }
}

/// `dst = alpha · lhs · rhs` (or `dst += …` with [`Accum::Add`]), as `faer`'s `matmul`.
pub fn matmul(
    dst: impl AsMatMut<T = f64, Rows = usize, Cols = usize>,
    accum: Accum,
    lhs: impl AsMatRef<T = f64, Rows = usize, Cols = usize>,
    rhs: impl AsMatRef<T = f64, Rows = usize, Cols = usize>,
    alpha: f64,
    par: Par,
) {
    matmul::matmul(dst, accum, lhs, rhs, alpha, par);
    clear_upper_simd_state();
}

/// Solves `L X = B` in place for lower-triangular `L`, as `faer`'s routine.
pub fn solve_lower_triangular_in_place(l: MatRef<'_, f64>, rhs: MatMut<'_, f64>, par: Par) {
    triangular_solve::solve_lower_triangular_in_place(l, rhs, par);
    clear_upper_simd_state();
}

/// Solves `U X = B` in place for upper-triangular `U`, as `faer`'s routine.
pub fn solve_upper_triangular_in_place(u: MatRef<'_, f64>, rhs: MatMut<'_, f64>, par: Par) {
    triangular_solve::solve_upper_triangular_in_place(u, rhs, par);
    clear_upper_simd_state();
}
