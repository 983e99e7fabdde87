//! Figures of fitted models: data points, the class Gaussians' 1σ and 2σ contours, and the
//! decision regions (shaded by predicted class on a grid, with the boundary traced between grid
//! cells of different classes). 2-D data is drawn directly; higher dimensions through the first
//! two linear discriminant directions of the data under the model's predicted classes. A model of
//! one feature is drawn against its posteriors: each class's P(class | x) as a curve, every row
//! at the posterior of its predicted class, and the decision regions as bands along x (a
//! projection would put every row on one line).

use density::linalg::{solve_lower_triangular_in_place, solve_upper_triangular_in_place};
use faer::{Mat, MatRef, Par};
use generative::{GaussianClassifier, GenerativeClassifier};

use crate::cli::PlotArgs;
use crate::data::{ReadOptions, read_csv, write_atomic};
use crate::error::{CliError, Result};
use crate::model_file::{FittedModel, ModelFile};
use crate::svg::{Panel, Svg, colour};

/// Grid cells per side for decision regions.
const GRID: usize = 120;

/// A point to draw: coordinates, class (None = unlabeled, grey) and whether it is emphasised.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub class: Option<usize>,
    pub labeled: bool,
}

/// One panel of a figure.
pub struct PanelSpec<'a> {
    pub title: String,
    /// Model for the decision regions: a grid over the panel for two features, bands along x
    /// for one; none for other models.
    pub regions: Option<&'a dyn GenerativeClassifier>,
    /// Gaussians to outline: (class, mean, lower Cholesky factor), 2-D.
    pub ellipses: Vec<(usize, [f64; 2], [[f64; 2]; 2])>,
    pub points: Vec<Point>,
    /// Lines to draw through data coordinates, coloured by class (the posterior curves of a
    /// one-feature model).
    pub curves: Vec<(usize, Vec<(f64, f64)>)>,
    pub axis_labels: (String, String),
}

impl std::fmt::Debug for PanelSpec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PanelSpec")
            .field("title", &self.title)
            .field("points", &self.points.len())
            .finish()
    }
}

/// Ellipses of a 2-D Gaussian model (one per component, coloured by class).
pub fn gaussian_ellipses(
    model: &GaussianClassifier,
    component_class: &[usize],
) -> Vec<(usize, [f64; 2], [[f64; 2]; 2])> {
    if model.n_features() != 2 {
        return Vec::new();
    }
    let means = model.means();
    (0..model.n_classes())
        .map(|c| {
            let l = model.cholesky(c);
            (
                component_class[c],
                [means[(c, 0)], means[(c, 1)]],
                [[l[(0, 0)], 0.0], [l[(1, 0)], l[(1, 1)]]],
            )
        })
        .collect()
}

fn padded_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.05).max(1e-6);
    (lo - pad, hi + pad)
}

/// Renders panels side by side.
pub fn render(panels: &[PanelSpec<'_>], class_names: &[String]) -> String {
    let (pw, ph, margin) = (420.0, 420.0, 70.0);
    let width = margin + panels.len() as f64 * (pw + margin);
    let mut svg = Svg::new(width, ph + 2.0 * margin + 30.0);
    let curve_points = || {
        panels
            .iter()
            .flat_map(|p| p.curves.iter().flat_map(|(_, line)| line.iter()))
    };
    let x_range = padded_range(
        panels
            .iter()
            .flat_map(|p| p.points.iter().map(|q| q.x))
            .chain(curve_points().map(|q| q.0)),
    );
    let y_range = padded_range(
        panels
            .iter()
            .flat_map(|p| p.points.iter().map(|q| q.y))
            .chain(curve_points().map(|q| q.1)),
    );
    for (i, spec) in panels.iter().enumerate() {
        let panel = Panel {
            left: margin + i as f64 * (pw + margin),
            top: margin,
            width: pw,
            height: ph,
            x_range,
            y_range,
        };
        match spec.regions {
            Some(model) if model.n_features() == 1 => draw_bands(&mut svg, &panel, model),
            Some(model) if model.n_features() == 2 => draw_regions(&mut svg, &panel, model),
            _ => {}
        }
        for (class, line) in &spec.curves {
            let pts: Vec<(f64, f64)> = line
                .iter()
                .map(|&(x, y)| (panel.px(x), panel.py(y)))
                .collect();
            svg.polyline(&pts, colour(*class), 1.8, false);
        }
        for q in spec.points.iter().filter(|q| !q.labeled) {
            let c = q.class.map_or("#888888", colour);
            svg.circle(panel.px(q.x), panel.py(q.y), 1.6, c, 0.45, None);
        }
        for (class, mean, l) in &spec.ellipses {
            for r in [1.0, 2.0] {
                let pts: Vec<(f64, f64)> = (0..=72)
                    .map(|s| {
                        let t = s as f64 / 72.0 * std::f64::consts::TAU;
                        let (u, v) = (r * t.cos(), r * t.sin());
                        (
                            panel.px(mean[0] + l[0][0] * u),
                            panel.py(mean[1] + l[1][0] * u + l[1][1] * v),
                        )
                    })
                    .collect();
                svg.polyline(&pts, colour(*class), 1.8, r > 1.5);
            }
        }
        for q in spec.points.iter().filter(|q| q.labeled) {
            svg.circle(
                panel.px(q.x),
                panel.py(q.y),
                4.5,
                q.class.map_or("#888888", colour),
                1.0,
                Some("black"),
            );
        }
        svg.axes(
            &panel,
            &spec.title,
            &spec.axis_labels.0,
            &spec.axis_labels.1,
        );
    }
    // Legend.
    let y = ph + 2.0 * margin + 10.0;
    let mut x = margin;
    for (k, name) in class_names.iter().enumerate() {
        svg.circle(x, y - 4.0, 5.0, colour(k), 1.0, Some("black"));
        svg.text(x + 9.0, y, name, 12.0, "start");
        x += 30.0 + 7.0 * name.len() as f64;
    }
    let mut key = String::from("large: labeled · small: unlabeled");
    if panels.iter().any(|p| !p.ellipses.is_empty()) {
        key.push_str(" · ellipses: 1σ (solid) and 2σ (dashed)");
    }
    if panels.iter().any(|p| !p.curves.is_empty()) {
        key.push_str(" · curves: P(class | x)");
    }
    svg.text(x + 10.0, y, &key, 11.0, "start");
    svg.finish()
}

/// Decision regions of a one-feature model: a band of the predicted class's colour over each run
/// of grid cells along x, and a boundary line where the class changes.
fn draw_bands(svg: &mut Svg, panel: &Panel, model: &dyn GenerativeClassifier) {
    let (x0, x1) = panel.x_range;
    let dx = (x1 - x0) / GRID as f64;
    let grid = Mat::from_fn(GRID, 1, |i, _| x0 + i as f64 * dx + dx / 2.0);
    // Models with a discrete domain cannot score a continuous grid: draw no regions then.
    let Ok(pred) = model.predict(grid.as_ref()) else {
        return;
    };
    let mut start = 0;
    for i in 1..=GRID {
        if i == GRID || pred[i] != pred[start] {
            let (left, right) = (x0 + start as f64 * dx, x0 + i as f64 * dx);
            svg.rect(
                panel.px(left),
                panel.top,
                panel.px(right) - panel.px(left),
                panel.height,
                colour(pred[start]),
                0.12,
            );
            if i < GRID {
                let x = panel.px(right);
                svg.polyline(
                    &[(x, panel.top), (x, panel.top + panel.height)],
                    "#222",
                    1.4,
                    false,
                );
            }
            start = i;
        }
    }
}

/// Each class's posterior P(class | x) of a one-feature model at `points` values of x spread over
/// `range`, as curves for [`PanelSpec::curves`]; empty when the model cannot score those values
/// (a discrete domain).
pub fn posterior_curves(
    model: &dyn GenerativeClassifier,
    range: (f64, f64),
    points: usize,
) -> Vec<(usize, Vec<(f64, f64)>)> {
    let step = (range.1 - range.0) / (points.max(2) - 1) as f64;
    let grid = Mat::from_fn(points.max(2), 1, |i, _| range.0 + i as f64 * step);
    let Ok(proba) = model.predict_proba(grid.as_ref()) else {
        return Vec::new();
    };
    (0..model.n_classes())
        .map(|c| {
            (
                c,
                (0..grid.nrows())
                    .map(|i| (grid[(i, 0)], proba[(i, c)]))
                    .collect(),
            )
        })
        .collect()
}

fn draw_regions(svg: &mut Svg, panel: &Panel, model: &dyn GenerativeClassifier) {
    let (x0, x1) = panel.x_range;
    let (y0, y1) = panel.y_range;
    let (dx, dy) = ((x1 - x0) / GRID as f64, (y1 - y0) / GRID as f64);
    let grid = Mat::from_fn(GRID * GRID, 2, |r, j| {
        if j == 0 {
            x0 + (r % GRID) as f64 * dx + dx / 2.0
        } else {
            y0 + (r / GRID) as f64 * dy + dy / 2.0
        }
    });
    // Models with a discrete domain cannot score a continuous grid: draw no regions then.
    let Ok(pred) = model.predict(grid.as_ref()) else {
        return;
    };
    let cell = |i: usize, j: usize| pred[j * GRID + i];
    // One rectangle per run of equal cells in a grid row keeps the file small.
    for j in 0..GRID {
        let mut start = 0;
        for i in 1..=GRID {
            if i == GRID || cell(i, j) != cell(start, j) {
                let (px, py) = (
                    panel.px(x0 + start as f64 * dx),
                    panel.py(y0 + (j + 1) as f64 * dy),
                );
                let w = (i - start) as f64 * panel.width / GRID as f64;
                svg.rect(
                    px,
                    py,
                    w,
                    panel.height / GRID as f64,
                    colour(cell(start, j)),
                    0.12,
                );
                start = i;
            }
        }
    }
    // Boundary: edges between cells of different predicted class.
    for j in 0..GRID {
        for i in 0..GRID {
            if i + 1 < GRID && cell(i, j) != cell(i + 1, j) {
                let x = x0 + (i + 1) as f64 * dx;
                svg.polyline(
                    &[
                        (panel.px(x), panel.py(y0 + j as f64 * dy)),
                        (panel.px(x), panel.py(y0 + (j + 1) as f64 * dy)),
                    ],
                    "#222",
                    1.4,
                    false,
                );
            }
            if j + 1 < GRID && cell(i, j) != cell(i, j + 1) {
                let y = y0 + (j + 1) as f64 * dy;
                svg.polyline(
                    &[
                        (panel.px(x0 + i as f64 * dx), panel.py(y)),
                        (panel.px(x0 + (i + 1) as f64 * dx), panel.py(y)),
                    ],
                    "#222",
                    1.4,
                    false,
                );
            }
        }
    }
}

/// The first two linear discriminant directions of `x` under classes `y` (d × 2): the leading
/// generalised eigenvectors of (S_B, S_W), through the Cholesky factor of S_W. With two classes
/// there is one discriminant direction; the second axis is the within-class whitened direction
/// orthogonal to it.
pub fn lda_directions(x: MatRef<'_, f64>, y: &[usize], n_classes: usize) -> Result<Mat<f64>> {
    let (n, d) = (x.nrows(), x.ncols());
    let mut means = vec![vec![0.0; d]; n_classes];
    let mut counts = vec![0.0; n_classes];
    for i in 0..n {
        counts[y[i]] += 1.0;
        for j in 0..d {
            means[y[i]][j] += x[(i, j)];
        }
    }
    for k in 0..n_classes {
        if counts[k] > 0.0 {
            means[k].iter_mut().for_each(|m| *m /= counts[k]);
        }
    }
    let total: Vec<f64> = (0..d)
        .map(|j| (0..n_classes).map(|k| means[k][j] * counts[k]).sum::<f64>() / n as f64)
        .collect();
    let mut sw = Mat::<f64>::zeros(d, d);
    for i in 0..n {
        for a in 0..d {
            for b in 0..d {
                sw[(a, b)] += (x[(i, a)] - means[y[i]][a]) * (x[(i, b)] - means[y[i]][b]);
            }
        }
    }
    let trace: f64 = (0..d).map(|j| sw[(j, j)]).sum();
    for j in 0..d {
        sw[(j, j)] += 1e-9 * trace / d as f64 + 1e-300;
    }
    let sb = Mat::from_fn(d, d, |a, b| {
        (0..n_classes)
            .map(|k| counts[k] * (means[k][a] - total[a]) * (means[k][b] - total[b]))
            .sum::<f64>()
    });
    let l = density::mvn::cholesky_lower(sw.as_ref())
        .map_err(|e| CliError::Data(format!("cannot project the data: {e}")))?;
    // M = L⁻¹ S_B L⁻ᵀ (symmetric).
    let mut a = sb.clone();
    solve_lower_triangular_in_place(l.as_ref(), a.as_mut(), Par::Seq);
    let mut m = a.transpose().to_owned();
    solve_lower_triangular_in_place(l.as_ref(), m.as_mut(), Par::Seq);
    let power = |m: &Mat<f64>, against: Option<&[f64]>| -> Vec<f64> {
        let mut v: Vec<f64> = (0..d).map(|i| 1.0 / (1.0 + i as f64)).collect();
        for _ in 0..1000 {
            let mut w: Vec<f64> = (0..d)
                .map(|i| (0..d).map(|j| m[(i, j)] * v[j]).sum())
                .collect();
            if let Some(u) = against {
                let p: f64 = w.iter().zip(u).map(|(a, b)| a * b).sum();
                w.iter_mut().zip(u).for_each(|(a, b)| *a -= p * b);
            }
            let norm = w.iter().map(|t| t * t).sum::<f64>().sqrt();
            if norm < 1e-300 {
                break;
            }
            w.iter_mut().for_each(|t| *t /= norm);
            v = w;
        }
        v
    };
    let v1 = power(&m, None);
    let mut v2 = power(&m, Some(&v1));
    let p: f64 = v2.iter().zip(&v1).map(|(a, b)| a * b).sum();
    v2.iter_mut().zip(&v1).for_each(|(a, b)| *a -= p * b);
    let norm = v2.iter().map(|t| t * t).sum::<f64>().sqrt();
    if norm < 1e-8 {
        // Rank-one S_B (two classes): any whitened direction orthogonal to v1.
        let j = (0..d)
            .min_by(|a, b| v1[*a].abs().total_cmp(&v1[*b].abs()))
            .unwrap_or(0);
        v2 = (0..d)
            .map(|i| if i == j { 1.0 } else { 0.0 } - v1[j] * v1[i])
            .collect();
    }
    let norm = v2.iter().map(|t| t * t).sum::<f64>().sqrt().max(1e-300);
    v2.iter_mut().for_each(|t| *t /= norm);
    // Directions in the original space: w = L⁻ᵀ v.
    let mut w = Mat::from_fn(d, 2, |i, c| if c == 0 { v1[i] } else { v2[i] });
    solve_upper_triangular_in_place(l.transpose(), w.as_mut(), Par::Seq);
    Ok(w)
}

/// Runs `ssl-cli plot`.
pub fn plot(args: &PlotArgs) -> Result<()> {
    let file = ModelFile::load(&args.model)?;
    let data = read_csv(
        &args.data,
        &ReadOptions {
            label: Some(&file.label_column),
            features: Some(&file.features),
            unlabeled_marker: "",
            require_label: false,
        },
    )?;
    let model = file.model.classifier();
    let mut spec_points = Vec::new();
    let mut x_all = data.unlabeled.clone();
    x_all.append(&data.labeled);
    let mut labeled_flags = Vec::new();
    for (rows, labeled) in [(&data.unlabeled, false), (&data.labeled, true)] {
        labeled_flags.extend(
            (0..rows.len()).map(|i| labeled && rows.label(i).is_some_and(|l| !l.is_empty())),
        );
    }
    let d = file.features.len();
    let (n, x) = (labeled_flags.len(), x_all.matrix());
    let data_error =
        |e: generative::GenerativeError| CliError::Data(format!("{}: {e}", data.source));
    let pred = model.predict(x).map_err(data_error)?;
    let mut curves = Vec::new();
    let (coords, axis_labels, regions, ellipses, view) = if d == 1 {
        // The posterior's height says how sure the model is of each row's class.
        let proba = model.predict_proba(x).map_err(data_error)?;
        let coords = Mat::from_fn(n, 2, |i, j| {
            if j == 0 {
                x[(i, 0)]
            } else {
                proba[(i, pred[i])]
            }
        });
        let range = padded_range((0..n).map(|i| x[(i, 0)]));
        curves = posterior_curves(model, range, 4 * GRID);
        (
            coords,
            (file.features[0].clone(), "P(class | x)".to_string()),
            Some(model),
            Vec::new(),
            format!("posteriors along {}", file.features[0]),
        )
    } else if d == 2 {
        let ellipses = match &file.model {
            FittedModel::Gaussian(g) => gaussian_ellipses(g.components(), g.component_class()),
            _ => Vec::new(),
        };
        (
            x.to_owned(),
            (file.features[0].clone(), file.features[1].clone()),
            Some(model),
            ellipses,
            "predicted classes".to_string(),
        )
    } else {
        let w = lda_directions(x, &pred, file.classes.len())?;
        (
            x * &w,
            ("discriminant 1".to_string(), "discriminant 2".to_string()),
            None,
            Vec::new(),
            "predicted classes (LDA projection)".to_string(),
        )
    };
    for i in 0..n {
        spec_points.push(Point {
            x: coords[(i, 0)],
            y: coords[(i, 1)],
            class: Some(pred[i]),
            labeled: labeled_flags[i],
        });
    }
    let svg = render(
        &[PanelSpec {
            title: format!("{:?}: {view}", file.kind),
            regions,
            ellipses,
            points: spec_points,
            curves,
            axis_labels,
        }],
        &file.classes,
    );
    write_atomic(&args.out, svg.as_bytes())
}
