"""The exploration behind the fourth look (plan_look4.yaml), kept as a look: classifier verdicts against the interval
rule, leave-one-world-out on the nine worlds already seen. Not a result: the plan is judged on the added world.

    python benchmarks/validity/v2/explore_look4.py > benchmarks/validity/v2/explore_look4.txt
"""
import sys
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3]))
import numpy as np, yaml
from benchmarks.validity.v2 import report_look2 as L, report_v2 as v2
from benchmarks.validity.v2.looks import design, fills
from benchmarks.validity import stats

plan3 = yaml.safe_load(L.PLAN3.read_text())
rows = L.load_rows(plan3)
feats = yaml.safe_load(L.PLAN2.read_text())["models"]["tiers"]["v2c"]
cls = np.array([stats.realised_class(v2._num(r["d_pass1"]["lo"]), v2._num(r["d_pass1"]["hi"])) for r in rows])
w = np.array([r["world"] for r in rows])

def logistic(X, y, lam=1.0, iters=50):
    mu, sd = X.mean(0), X.std(0); sd[sd == 0] = 1
    Z = np.c_[np.ones(len(X)), (X - mu) / sd]
    b = np.zeros(Z.shape[1]); P = np.eye(Z.shape[1]) * lam; P[0, 0] = 0
    for _ in range(iters):
        p = 1 / (1 + np.exp(-Z @ b))
        g = Z.T @ (p - y) + P @ b
        H = Z.T @ (Z * (p * (1 - p))[:, None]) + P
        b -= np.linalg.solve(H, g)
    return lambda Xn: 1 / (1 + np.exp(-(np.c_[np.ones(len(Xn)), (Xn - mu) / sd] @ b)))

def impute(X, Xtr):
    m = np.nanmean(Xtr, 0); X = X.copy(); i = np.where(~np.isfinite(X)); X[i] = np.take(m, i[1]); return X

for fset_name, fset in [("v2c", feats), ("G only", ["accuracy_gap"]), ("G+c(kl)+c(fresh)", ["accuracy_gap", "c(lookahead_kl)", "c(lookahead_fresh)"])]:
    p_imp = np.full(len(rows), np.nan); p_deg = p_imp.copy()
    for held in sorted(set(w)):
        tr, te = w != held, w == held
        X = design(rows, fset, fills([r for r, t in zip(rows, tr) if t], fset))
        Xtr = impute(X[tr], X[tr]); Xte = impute(X[te], X[tr])
        p_imp[te] = logistic(Xtr, (cls[tr] == "improves").astype(float))(Xte)
        p_deg[te] = logistic(Xtr, (cls[tr] == "degrades").astype(float))(Xte)
    for tau in (0.6, 0.7, 0.8, 0.9):
        v = np.where(p_imp >= tau, "helps", np.where(p_deg >= tau, "hurts", "unclear"))
        dec = v != "unclear"
        right = ((v == "helps") & (cls == "improves")) | ((v == "hurts") & (cls == "degrades"))
        hp = ((v == "helps") & (cls == "improves")).sum() / max(1, (v == "helps").sum())
        hu = ((v == "hurts") & (cls == "degrades")).sum() / max(1, (v == "hurts").sum())
        print(f"{fset_name:22s} tau {tau}: decisive {dec.sum():3d}/{len(rows)} right {right.sum()/max(1,dec.sum()):.2f} "
              f"unclear {1-dec.mean():.2f} helps n={(v=='helps').sum()} prec {hp:.2f} hurts n={(v=='hurts').sum()} prec {hu:.2f}")
    # per world accuracy at 0.8
    v = np.where(p_imp >= 0.8, "helps", np.where(p_deg >= 0.8, "hurts", "unclear"))
    print("  per world @0.8:", {k: (int(((v != 'unclear') & (w == k)).sum()), int((((v == 'helps') & (cls == 'improves')) | ((v == 'hurts') & (cls == 'degrades')))[w == k].sum())) for k in sorted(set(w))})
print("class counts", {k: int((cls == k).sum()) for k in sorted(set(cls))})
