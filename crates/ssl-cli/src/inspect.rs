//! `ssl-cli inspect`: a readable account of a model file.

use generative::GenerativeClassifier;

use crate::cli::InspectArgs;
use crate::error::Result;
use crate::model_file::{FittedModel, ModelFile};

fn row(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:>11.5}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `ssl-cli inspect`.
pub fn inspect(args: &InspectArgs) -> Result<()> {
    let f = ModelFile::load(&args.model)?;
    let m = f.model.classifier();
    println!("model: {:?} ({} format v{})", f.kind, f.format, f.version);
    println!("classes ({}): {}", f.classes.len(), f.classes.join(", "));
    println!("features ({}): {}", f.features.len(), f.features.join(", "));
    println!("label column: {}", f.label_column);
    println!("free parameters: {}", m.n_parameters());
    match &f.model {
        FittedModel::Gaussian(g) => {
            let comps = g.components();
            let d = comps.n_features();
            let means = comps.means();
            println!("\ncovariance structure: {:?}", comps.structure());
            for (c, class) in g.component_class().iter().enumerate() {
                let name = &f.classes[*class];
                println!(
                    "component {c} (class {name}): prior {:.5}",
                    comps.log_priors()[c].exp()
                );
                println!(
                    "  mean       {}",
                    row(&(0..d).map(|j| means[(c, j)]).collect::<Vec<_>>())
                );
                let cov = comps.covariance(c);
                for i in 0..d {
                    println!(
                        "  {} {}",
                        if i == 0 { "covariance" } else { "          " },
                        row(&(0..d).map(|j| cov[(i, j)]).collect::<Vec<_>>())
                    );
                }
            }
            if let Some(disc) = comps
                .linear_discriminant()
                .filter(|_| g.component_class().len() == f.classes.len())
            {
                println!("\nlinear discriminant a_k(x) = w_k . x + w_k0 (posterior = softmax):");
                for (k, name) in f.classes.iter().enumerate() {
                    println!(
                        "  {name}: w = [{}], w0 = {:.6}",
                        row(&disc.weights[k * d..(k + 1) * d]).trim(),
                        disc.intercepts[k]
                    );
                }
                if let Some((w, w0)) = disc.binary() {
                    println!(
                        "  two classes: p({} | x) = sigmoid(w . x + w0) with w = [{}], w0 = {w0:.6}",
                        f.classes[1],
                        row(&w).trim()
                    );
                }
            }
        }
        FittedModel::Bernoulli(b) => {
            let lp = b.components().feature_log_prob();
            println!("\nP(feature = 1 | component):");
            for c in 0..lp.nrows() {
                println!(
                    "  {:<12} {}",
                    f.classes[b.component_class()[c]],
                    row(&(0..lp.ncols())
                        .map(|j| lp[(c, j)].exp())
                        .collect::<Vec<_>>())
                );
            }
        }
        FittedModel::Multinomial(mn) => {
            let lp = mn.components().feature_log_prob();
            println!("\nword probabilities per component:");
            for c in 0..lp.nrows() {
                println!(
                    "  {:<12} {}",
                    f.classes[mn.component_class()[c]],
                    row(&(0..lp.ncols())
                        .map(|j| lp[(c, j)].exp())
                        .collect::<Vec<_>>())
                );
            }
        }
        FittedModel::Categorical(cn) => {
            println!(
                "\ncategories per feature: {:?}",
                cn.components().n_categories()
            );
        }
    }
    println!("\ntrained on: {}", f.training.data.join(", "));
    match &f.training.em {
        None => println!("training: supervised fit"),
        Some(r) => {
            println!(
                "training: {:?} EM, lambda {}, {} labeled + {} unlabeled rows, {} iterations, {}, objective {:.6}",
                r.mode,
                r.lambda,
                r.n_labeled,
                r.n_unlabeled,
                r.iterations,
                if r.converged {
                    "converged"
                } else {
                    "not converged"
                },
                r.objective
            );
            println!("components per class: {:?}", r.components_per_class);
            if let Some(d) = &r.diagnostic {
                println!(
                    "dominance check: {:?} (likelihood ratio {:.2}, p = {:.3e})",
                    d.verdict, d.likelihood_ratio, d.p_value
                );
            }
        }
    }
    Ok(())
}
