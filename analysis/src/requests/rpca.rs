//! Robust principal component analysis (seed 004 §V.B): a matrix M is split into a low-rank
//! part L and a sparse part E, M = L + E, by the *inexact augmented Lagrange multiplier*
//! method of Lin, Chen and Ma (2010, the algorithm seed 004 cites): minimise ‖L‖_* + λ‖E‖_1
//! subject to M = L + E, alternating singular-value thresholding for L and soft thresholding
//! for E, with λ = 1/√max(m, n), μ₀ = 1.25/‖M‖₂, μ growing by ρ = 1.5 up to μ₀·10⁷, until
//! ‖M − L − E‖_F / ‖M‖_F < 10⁻⁷ or [`RpcaOptions::max_iter`] iterations.
//!
//! A column of M far from the column space of L — a small cosine between M(j) and L(j),
//! seed 004's equation (1) — is a corrupted column: [`column_cosine`].
//!
//! The SVDs are faer's, with the `rpca` feature; without it [`rpca`] returns
//! [`RpcaError::WithoutRpca`] for any matrix that is not all zeros.

#[cfg(feature = "rpca")]
use faer::Mat;

/// A dense matrix of `f64`, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<f64>,
}

impl Matrix {
    /// A `rows` × `cols` matrix of zeros.
    pub fn zeros(rows: usize, cols: usize) -> Matrix {
        Matrix {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    /// A matrix whose entry (i, j) is `f(i, j)`.
    pub fn from_fn(rows: usize, cols: usize, mut f: impl FnMut(usize, usize) -> f64) -> Matrix {
        let mut m = Matrix::zeros(rows, cols);
        for i in 0..rows {
            for j in 0..cols {
                m.data[i * cols + j] = f(i, j);
            }
        }
        m
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Entry (i, j).
    pub fn get(&self, i: usize, j: usize) -> f64 {
        self.data[i * self.cols + j]
    }

    /// Sets entry (i, j).
    pub fn set(&mut self, i: usize, j: usize, v: f64) {
        self.data[i * self.cols + j] = v;
    }

    /// Column `j`.
    pub fn col(&self, j: usize) -> impl Iterator<Item = f64> + '_ {
        (0..self.rows).map(move |i| self.get(i, j))
    }

    /// Frobenius norm.
    pub fn frobenius(&self) -> f64 {
        self.data.iter().map(|v| v * v).sum::<f64>().sqrt()
    }

    #[cfg(feature = "rpca")]
    fn to_faer(&self) -> Mat<f64> {
        Mat::from_fn(self.rows, self.cols, |i, j| self.get(i, j))
    }
}

/// Settings of [`rpca`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RpcaOptions {
    /// Weight of the sparse part; `None`: 1/√max(m, n).
    pub lambda: Option<f64>,
    /// Stop when ‖M − L − E‖_F / ‖M‖_F falls below this.
    pub tol: f64,
    /// Most iterations.
    pub max_iter: usize,
}

impl Default for RpcaOptions {
    fn default() -> Self {
        RpcaOptions {
            lambda: None,
            tol: 1e-7,
            max_iter: 1000,
        }
    }
}

/// The result of [`rpca`].
#[derive(Clone, Debug, PartialEq)]
pub struct Rpca {
    /// The low-rank part L.
    pub low_rank: Matrix,
    /// The sparse part E.
    pub sparse: Matrix,
    /// Iterations run.
    pub iterations: usize,
    /// ‖M − L − E‖_F / ‖M‖_F at the end.
    pub residual: f64,
    /// True when the residual fell below the tolerance.
    pub converged: bool,
}

/// Why RPCA could not be computed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RpcaError {
    /// The matrix has a non-finite entry.
    #[error("the matrix has a value that is not a finite number")]
    NotFinite,
    /// The singular value decomposition did not converge.
    #[error("the singular value decomposition did not converge")]
    Svd,
    /// This build has no SVD (culprit-analysis' `rpca` feature is off).
    #[error("this build has no robust PCA (culprit-analysis' `rpca` feature)")]
    WithoutRpca,
}

/// Splits `m` into low-rank and sparse parts by inexact ALM (module docs). A matrix of zeros
/// (or an empty one) splits into zeros.
pub fn rpca(m: &Matrix, opts: &RpcaOptions) -> Result<Rpca, RpcaError> {
    let (r, c) = (m.rows, m.cols);
    if m.data.iter().any(|v| !v.is_finite()) {
        return Err(RpcaError::NotFinite);
    }
    let norm_f = m.frobenius();
    if r == 0 || c == 0 || norm_f == 0.0 {
        return Ok(Rpca {
            low_rank: Matrix::zeros(r, c),
            sparse: Matrix::zeros(r, c),
            iterations: 0,
            residual: 0.0,
            converged: true,
        });
    }
    let lambda = opts.lambda.unwrap_or(1.0 / (r.max(c) as f64).sqrt());
    let norm_two = spectral_norm(m)?;
    let norm_inf = m.data.iter().fold(0.0f64, |a, v| a.max(v.abs())) / lambda;
    let dual = norm_two.max(norm_inf);
    let mut y: Vec<f64> = m.data.iter().map(|v| v / dual).collect();
    let mut mu = 1.25 / norm_two;
    let mu_bar = mu * 1e7;
    let rho = 1.5;
    let mut e = Matrix::zeros(r, c);
    let mut l = Matrix::zeros(r, c);
    let mut iterations = 0;
    let mut residual = 1.0;
    while iterations < opts.max_iter {
        iterations += 1;
        // L: singular-value thresholding of M − E + Y/μ at 1/μ.
        let z = Matrix {
            rows: r,
            cols: c,
            data: (0..r * c)
                .map(|k| m.data[k] - e.data[k] + y[k] / mu)
                .collect(),
        };
        l = svt(&z, 1.0 / mu)?;
        // E: soft thresholding of M − L + Y/μ at λ/μ.
        let t = lambda / mu;
        for (k, ek) in e.data.iter_mut().enumerate() {
            let v = m.data[k] - l.data[k] + y[k] / mu;
            *ek = v.signum() * (v.abs() - t).max(0.0);
        }
        let mut rr = 0.0;
        for (k, yk) in y.iter_mut().enumerate() {
            let d = m.data[k] - l.data[k] - e.data[k];
            *yk += mu * d;
            rr += d * d;
        }
        residual = rr.sqrt() / norm_f;
        if residual < opts.tol {
            break;
        }
        mu = (mu * rho).min(mu_bar);
    }
    Ok(Rpca {
        low_rank: l,
        sparse: e,
        iterations,
        residual,
        converged: residual < opts.tol,
    })
}

/// The largest singular value.
#[cfg(feature = "rpca")]
fn spectral_norm(m: &Matrix) -> Result<f64, RpcaError> {
    let s = m.to_faer().singular_values().map_err(|_| RpcaError::Svd)?;
    Ok(s.first().copied().unwrap_or(0.0))
}

/// The largest singular value: none in a build without the SVD.
#[cfg(not(feature = "rpca"))]
fn spectral_norm(_m: &Matrix) -> Result<f64, RpcaError> {
    Err(RpcaError::WithoutRpca)
}

/// U · shrink(Σ, tau) · Vᵀ: none in a build without the SVD.
#[cfg(not(feature = "rpca"))]
fn svt(_z: &Matrix, _tau: f64) -> Result<Matrix, RpcaError> {
    Err(RpcaError::WithoutRpca)
}

/// U · shrink(Σ, tau) · Vᵀ.
#[cfg(feature = "rpca")]
fn svt(z: &Matrix, tau: f64) -> Result<Matrix, RpcaError> {
    let svd = z.to_faer().thin_svd().map_err(|_| RpcaError::Svd)?;
    let (u, s, v) = (svd.U(), svd.S().column_vector(), svd.V());
    let kept: Vec<(usize, f64)> = (0..s.nrows())
        .map(|k| (k, s[k] - tau))
        .filter(|&(_, x)| x > 0.0)
        .collect();
    Ok(Matrix::from_fn(z.rows, z.cols, |i, j| {
        kept.iter().map(|&(k, x)| u[(i, k)] * x * v[(j, k)]).sum()
    }))
}

/// Seed 004's equation (1): cos θ = M(j)·L(j) / (‖M(j)‖₂ ‖L(j)‖₂), the cosine between column
/// `j` of M and of L. 1 for a column L reproduces; near 0 for one L cannot explain. A column
/// of zeros in either is at cosine 0 unless both are (1).
pub fn column_cosine(m: &Matrix, l: &Matrix, j: usize) -> f64 {
    let (mut dot, mut nm, mut nl) = (0.0, 0.0, 0.0);
    for (a, b) in m.col(j).zip(l.col(j)) {
        dot += a * b;
        nm += a * a;
        nl += b * b;
    }
    match (nm > 0.0, nl > 0.0) {
        (true, true) => (dot / (nm.sqrt() * nl.sqrt())).clamp(-1.0, 1.0),
        (false, false) => 1.0,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank-2 matrix: row i is a mix of two column profiles, like request latencies where
    /// each method's time follows two load factors.
    fn low_rank(rows: usize, cols: usize) -> Matrix {
        let a: Vec<f64> = (0..cols).map(|j| 1.0 + j as f64).collect();
        let b: Vec<f64> = (0..cols).map(|j| ((j * 7) % 5) as f64 + 0.5).collect();
        Matrix::from_fn(rows, cols, |i, j| {
            let x = 1.0 + (i % 7) as f64 * 0.3;
            let y = 0.5 + ((i * 13) % 11) as f64 * 0.1;
            x * a[j] + y * b[j]
        })
    }

    #[test]
    #[cfg(feature = "rpca")]
    fn recovers_a_planted_sparse_column() {
        let (rows, cols, bad) = (120, 12, 5);
        let l0 = low_rank(rows, cols);
        let mut m = l0.clone();
        // A quarter of the rows (one node of four) is 40× slower in column `bad`.
        let corrupted: Vec<usize> = (0..rows).filter(|i| i % 4 == 2).collect();
        for &i in &corrupted {
            m.set(i, bad, m.get(i, bad) + 40.0 * l0.get(i, bad));
        }
        let out = rpca(&m, &RpcaOptions::default()).unwrap();
        assert!(out.converged, "residual {}", out.residual);
        // The low-rank part is the clean matrix, to within 1 %.
        let err = Matrix::from_fn(rows, cols, |i, j| out.low_rank.get(i, j) - l0.get(i, j));
        assert!(
            err.frobenius() / l0.frobenius() < 0.01,
            "L off by {}",
            err.frobenius() / l0.frobenius()
        );
        // The planted column is the one far from the low-rank space, and E holds its rows.
        let cos: Vec<f64> = (0..cols)
            .map(|j| column_cosine(&m, &out.low_rank, j))
            .collect();
        let worst = (0..cols)
            .min_by(|&a, &b| cos[a].total_cmp(&cos[b]))
            .unwrap();
        assert_eq!(worst, bad, "cosines {cos:?}");
        assert!(cos[bad] < 0.7, "cosines {cos:?}");
        for (j, c) in cos.iter().enumerate().filter(|&(j, _)| j != bad) {
            assert!(*c > 0.999, "column {j} at {c}");
        }
        for i in 0..rows {
            let big = out.sparse.get(i, bad) > 10.0 * l0.get(i, bad);
            assert_eq!(big, corrupted.contains(&i), "row {i}");
        }
    }

    #[test]
    #[cfg(feature = "rpca")]
    fn a_low_rank_matrix_has_no_sparse_part() {
        let m = low_rank(50, 8);
        let out = rpca(&m, &RpcaOptions::default()).unwrap();
        let e = out.sparse.frobenius() / m.frobenius();
        let cos: Vec<f64> = (0..8)
            .map(|j| column_cosine(&m, &out.low_rank, j))
            .collect();
        assert!(e < 0.01, "E is {e} of M; cosines {cos:?}");
        assert!(cos.iter().all(|&c| c > 0.999), "cosines {cos:?}");
    }

    #[test]
    fn degenerate_input() {
        let z = Matrix::zeros(3, 4);
        let out = rpca(&z, &RpcaOptions::default()).unwrap();
        assert_eq!(out.iterations, 0);
        let mut bad = Matrix::zeros(2, 2);
        bad.set(0, 1, f64::NAN);
        assert_eq!(
            rpca(&bad, &RpcaOptions::default()).unwrap_err(),
            RpcaError::NotFinite
        );
        assert_eq!(
            rpca(&Matrix::zeros(0, 3), &RpcaOptions::default())
                .unwrap()
                .iterations,
            0
        );
    }

    /// Without the SVD a matrix that needs one is refused, said as such: never a split that
    /// was not computed.
    #[test]
    #[cfg(not(feature = "rpca"))]
    fn without_the_svd_rpca_says_so() {
        assert_eq!(
            rpca(&low_rank(20, 4), &RpcaOptions::default()).unwrap_err(),
            RpcaError::WithoutRpca
        );
    }
}
