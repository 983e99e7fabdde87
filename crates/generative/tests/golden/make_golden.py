"""Reference probabilities from scikit-learn for the generative crate's golden tests.

Run once (CI does not need Python):
    python3 -m venv .venv-golden && .venv-golden/bin/pip install numpy scikit-learn
    .venv-golden/bin/python crates/generative/tests/golden/make_golden.py

Writes golden.json beside this file with the tool versions used.
"""
import json
import pathlib

import numpy as np
import sklearn
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.naive_bayes import BernoulliNB, CategoricalNB, GaussianNB, MultinomialNB

HERE = pathlib.Path(__file__).resolve().parent
DATA = (HERE / "../../../../data").resolve()


def load(name):
    rows = [line.strip().split(",") for line in (DATA / f"{name}.csv").read_text().splitlines()]
    header, body = rows[0], rows[1:]
    x = np.array([[float(v) for v in r[:-1]] for r in body])
    labels = [r[-1] for r in body]
    classes = sorted(set(labels))
    y = np.array([classes.index(v) for v in labels])
    return x, y, classes


def discretise(x):
    # Integer categories 0..k per feature: standardised distance from the column minimum.
    return np.floor((x - x.min(0)) / x.std(0)).astype(int)


out = {"versions": {"sklearn": sklearn.__version__, "numpy": np.__version__}, "datasets": {}}
for name, threshold in [("iris", 2.0), ("wine", 2.0)]:
    x, y, classes = load(name)
    xc = discretise(x)
    models = {
        "lda": LinearDiscriminantAnalysis(solver="lsqr"),
        "lda_shrink_auto": LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto"),
        "lda_shrink_0.3": LinearDiscriminantAnalysis(solver="lsqr", shrinkage=0.3),
        "gaussian_nb": GaussianNB(),
        "bernoulli_nb": BernoulliNB(alpha=1.0, binarize=threshold),
        "multinomial_nb": MultinomialNB(alpha=1.0),
        "multinomial_nb_alpha0.5": MultinomialNB(alpha=0.5),
    }
    entry = {"classes": classes, "y": y.tolist(), "binarize": threshold, "x_categorical": xc.tolist(), "models": {}}
    for key, model in models.items():
        model.fit(x, y)
        rec = {"proba": model.predict_proba(x).tolist()}
        if key.startswith("lda"):
            rec["coef"] = model.coef_.tolist()
            rec["intercept"] = model.intercept_.tolist()
        entry["models"][key] = rec
    cat = CategoricalNB(alpha=1.0).fit(xc, y)
    entry["models"]["categorical_nb"] = {"proba": cat.predict_proba(xc).tolist()}
    out["datasets"][name] = entry

(HERE / "golden.json").write_text(json.dumps(out))
print("wrote", HERE / "golden.json")
