//! `ssl-cli demo`: the main job on a built-in default. Seed 000's scenario (two overlapping
//! Gaussians, 10 labeled and 990 unlabeled points per class), labeled-only QDA vs semi-supervised
//! QDA, a table of accuracies and parameters, and a two-panel SVG figure.

use generative::{
    CovarianceStructure, GaussianParams, GenerativeClassifier, HyperParams, WeightedFit,
};
use ssl_em::scenarios::{accuracy, seed000, seed000_truth};
use ssl_em::{EmParams, SemiSupervisedEm};

use crate::cli::DemoArgs;
use crate::data::write_atomic;
use crate::error::{CliError, Result};
use crate::plot::{PanelSpec, Point, gaussian_ellipses, render};

/// Runs `ssl-cli demo`.
pub fn demo(args: &DemoArgs, quiet: bool) -> Result<()> {
    if args.labeled_per_class < 3 || args.labeled_per_class >= 1000 {
        return Err(CliError::Usage(format!(
            "--labeled-per-class must be between 3 and 999, got {}",
            args.labeled_per_class
        )));
    }
    let s = seed000(args.seed, args.labeled_per_class);
    let spec = GaussianParams::with_structure(CovarianceStructure::Full)
        .check()
        .map_err(|e| CliError::Data(e.to_string()))?;
    let sup = spec
        .fit(s.x_labeled.as_ref(), &s.y_labeled, 2)
        .map_err(|e| CliError::Data(e.to_string()))?;
    let fit = SemiSupervisedEm::new(spec, EmParams::default())
        .and_then(|em| {
            em.fit(
                s.x_labeled.as_ref(),
                &s.y_labeled,
                2,
                s.x_unlabeled.as_ref(),
            )
        })
        .map_err(|e| CliError::Data(e.to_string()))?;
    let acc = |m: &dyn GenerativeClassifier, x: faer::MatRef<'_, f64>, y: &[usize]| {
        m.predict(x).map(|p| accuracy(&p, y)).unwrap_or(f64::NAN)
    };
    let (u_sup, u_ssl) = (
        acc(&sup, s.x_unlabeled.as_ref(), &s.y_unlabeled),
        acc(&fit.model, s.x_unlabeled.as_ref(), &s.y_unlabeled),
    );
    let (t_sup, t_ssl) = (
        acc(&sup, s.x_test.as_ref(), &s.y_test),
        acc(&fit.model, s.x_test.as_ref(), &s.y_test),
    );
    let r = &fit.report;
    println!(
        "Seed 000 scenario (seed {}): class A ~ N((3,1), I), class B ~ N((2,2), [[1,.5],[.5,1]])",
        args.seed
    );
    println!(
        "{} labeled + {} unlabeled points per class; QDA\n",
        args.labeled_per_class,
        1000 - args.labeled_per_class
    );
    println!(
        "{:<28} {:>16} {:>16}",
        "", "labeled only", "semi-supervised"
    );
    println!(
        "{:<28} {:>16.4} {:>16.4}",
        "accuracy on unlabeled points", u_sup, u_ssl
    );
    println!(
        "{:<28} {:>16.4} {:>16.4}",
        "accuracy on 2000 test points", t_sup, t_ssl
    );
    println!(
        "\nEM: lambda {}, {} iterations, {}, objective {:.4}",
        r.lambda,
        r.iterations,
        if r.converged {
            "converged"
        } else {
            "not converged"
        },
        r.objective
    );
    if let Some(d) = &r.diagnostic {
        println!(
            "dominance check: {:?} (likelihood ratio {:.2}, p = {:.3})",
            d.verdict, d.likelihood_ratio, d.p_value
        );
    }
    let truth = seed000_truth();
    println!(
        "\n{:<8} {:>22} {:>22} {:>22}",
        "class", "true mean", "labeled-only mean", "semi-supervised mean"
    );
    let (ms, mf) = (sup.means(), fit.model.components().means());
    for (k, name) in ["A", "B"].iter().enumerate() {
        let t = truth[k].mean();
        println!(
            "{name:<8} {:>22} {:>22} {:>22}",
            format!("({:.3}, {:.3})", t[0], t[1]),
            format!("({:.3}, {:.3})", ms[(k, 0)], ms[(k, 1)]),
            format!("({:.3}, {:.3})", mf[(k, 0)], mf[(k, 1)])
        );
    }
    let mut points: Vec<Point> = (0..s.x_unlabeled.nrows())
        .map(|i| Point {
            x: s.x_unlabeled[(i, 0)],
            y: s.x_unlabeled[(i, 1)],
            class: None,
            labeled: false,
        })
        .collect();
    points.extend((0..s.x_labeled.nrows()).map(|i| Point {
        x: s.x_labeled[(i, 0)],
        y: s.x_labeled[(i, 1)],
        class: Some(s.y_labeled[i]),
        labeled: true,
    }));
    let names = vec!["A".to_string(), "B".to_string()];
    let panels = [
        PanelSpec {
            title: format!("labeled only: accuracy {t_sup:.3}"),
            regions: Some(&sup),
            ellipses: gaussian_ellipses(&sup, &[0, 1]),
            points: points.clone(),
            curves: Vec::new(),
            axis_labels: ("x1".into(), "x2".into()),
        },
        PanelSpec {
            title: format!("semi-supervised EM: accuracy {t_ssl:.3}"),
            regions: Some(&fit.model),
            ellipses: gaussian_ellipses(fit.model.components(), fit.model.component_class()),
            points,
            curves: Vec::new(),
            axis_labels: ("x1".into(), "x2".into()),
        },
    ];
    write_atomic(&args.out, render(&panels, &names).as_bytes())?;
    if !quiet {
        eprintln!("\nwrote {}", args.out);
    }
    Ok(())
}
