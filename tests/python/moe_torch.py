"""Float64 PyTorch reference for one MoE layer, written from Megatron-core's MoE code
(moe/router.py TopKRouter, moe/moe_utils.py topk_softmax_with_capacity,
switch_load_balancing_loss_func, sequence_load_balancing_loss_func, z_loss_func, sinkhorn,
permute/unpermute, moe/experts.py SequentialMLP, shared experts), on the inputs
tests/tools/moe_layer_run wrote. The routers' losses enter as Megatron's MoEAuxLossAutoScaler
makes them: objective = <out, dout> + grad_scale * (aux + z). Exits non-zero on a mismatch.

usage: moe_torch.py DIR [--tol 2e-5]"""
import json
import math
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)


def load(d, name, shape, dtype=np.float32):
    return torch.from_numpy(np.fromfile(f"{d}/{name}.bin", dtype=dtype).astype(
        np.float64 if dtype == np.float32 else dtype).reshape(shape))


def sinkhorn(cost, tol=0.0001):
    cost = torch.exp(cost)
    d0 = torch.ones(cost.size(0))
    d1 = torch.ones(cost.size(1))
    eps = 0.00000001
    error = 1e9
    d1_old = d1
    while error > tol:
        d0 = (1 / d0.size(0)) * 1 / (torch.sum(d1 * cost, 1) + eps)
        d1 = (1 / d1.size(0)) * 1 / (torch.sum(d0.unsqueeze(1) * cost, 0) + eps)
        error = torch.mean(torch.abs(d1_old - d1))
        d1_old = d1
    return d1 * cost * d0.unsqueeze(1)


def capacity_mask(m, gates, topk_map, cap, B, T):
    """Megatron's capacity selection per expert column: the `cap` largest gates (probs) or the
    routed tokens first, earliest in Megatron's [s, b] order (position); padding places go to
    the lowest unrouted token indices."""
    N, E = gates.shape
    mask = torch.zeros(N, E, dtype=torch.bool)
    order = [(n % T) * B + n // T for n in range(N)]
    for e in range(E):
        routed = [n for n in range(N) if topk_map[n, e]]
        if m["position"]:
            routed.sort(key=lambda n: order[n])
        else:
            routed.sort(key=lambda n: (-gates[n, e].item(), order[n]))
        chosen = routed[:cap]
        if len(chosen) < cap:
            chosen += [n for n in range(N) if not topk_map[n, e]][:cap - len(chosen)]
        for n in chosen:
            mask[n, e] = True
    return mask


def limited_topk(m, v, k):
    """Megatron's device_limited_topk over EP groups of E / G experts: the groups scored by
    their best expert, the `limited` best, then the top k of their experts (the others
    excluded: -inf; Megatron fills 0.0, which can pick them when logits are negative)."""
    N, E = v.shape
    G = m["groups"]
    group_best = v.view(N, G, E // G).max(dim=-1).values
    gidx = torch.topk(group_best, k=m["limited"], dim=-1).indices
    gmask = torch.zeros(N, G, dtype=torch.bool).scatter(1, gidx, True)
    emask = gmask.unsqueeze(-1).expand(N, G, E // G).reshape(N, E)
    return torch.topk(v.masked_fill(~emask, float("-inf")), k=k, dim=-1)


def route_limited(m, logits):
    """(gates [N, E], idx) of the router alone with limited devices."""
    N, E = logits.shape
    k = m["k"]
    scale = m["scale"] if m["scale"] > 0 else 1.0
    if m["pre"]:
        scores = torch.softmax(logits, dim=-1)
        probs, idx = limited_topk(m, scores, k)
    else:
        top, idx = limited_topk(m, logits, k)
        probs = torch.softmax(top, dim=-1)
    return torch.zeros(N, E).scatter(1, idx, probs * scale), idx


def router_only(d, m, tol):
    N, C, E, k = m["N"], m["C"], m["E"], m["k"]
    x = load(d, "x", (N, C)).requires_grad_()
    wr = load(d, "router", (E, C)).requires_grad_()
    logits = x @ wr.T
    gates, idx = route_limited(m, logits)
    dgate = load(d, "dgate", (N, k))
    c_idx = load(d, "idx", (N, k), np.int32).long()
    obj = (gates.gather(1, idx) * dgate).sum()
    if m["z"] >= 0:
        obj = obj + m["gscale"] * m["z"] * torch.mean(torch.square(torch.logsumexp(logits, dim=-1)))
    if m["lb"] == "aux_loss":
        tpe = torch.zeros(N, E).scatter(1, idx, 1.0).sum(0)
        aux = torch.sum(torch.softmax(logits, dim=-1).sum(0) * tpe) * (E / (N * N * k))
        obj = obj + m["gscale"] * m["aux"] * aux
        if abs(aux.item() - m["aux_value"]) > tol * max(1.0, aux.item()):
            print("  aux differs", aux.item(), m["aux_value"]); return 1
    obj.backward()
    bad = 0
    if not torch.equal(c_idx, idx):
        print("  idx differ"); bad = 1
    for name, got, want in (("gate", load(d, "gate", (N, k)), gates.detach().gather(1, idx)),
                            ("din", load(d, "din", (N, C)), x.grad),
                            ("drouter", load(d, "drouter", (E, C)), wr.grad)):
        err = (got - want).abs().max().item()
        scale = max(1.0, want.abs().max().item())
        print(f"  {name:10s} max|diff| {err:.3e} {'ok' if err <= tol * scale else 'FAIL'}")
        bad |= err > tol * scale
    # the choice is really limited: every token's experts within `limited` groups
    groups = (idx // (E // m["groups"]))
    for n in range(N):
        if len(set(groups[n].tolist())) > m["limited"]:
            print("  token", n, "uses more groups than allowed"); bad = 1
    return bad


def route(m, logits):
    """(gates [N, E] with the kept probabilities, final map, tokens_per_expert, idx [N, k],
    routed and kept [N, E])."""
    N, E = logits.shape
    k = m["k"]
    scale = m["scale"] if m["scale"] > 0 else None
    if m["lb"] == "sinkhorn":
        act = torch.sigmoid(logits) if k == 1 else torch.softmax(logits, dim=-1)
        if m["train"]:
            with torch.no_grad():
                _, idx = torch.topk(sinkhorn(logits.detach()), k=k, dim=1)
        else:
            _, idx = torch.topk(act, k=k, dim=1)
        fmap = torch.zeros(N, E, dtype=torch.bool).scatter(1, idx, True)
        return act * fmap, fmap, fmap.sum(0), idx, fmap
    if m["pre"]:
        scores = torch.softmax(logits, dim=-1)
        probs, idx = torch.topk(scores, k=k, dim=1)
    else:
        top, idx = torch.topk(logits, k=k, dim=1)
        probs = torch.softmax(top, dim=-1)
    if scale:
        probs = probs * scale
    gates = torch.zeros(N, E).scatter(1, idx, probs)
    topk_map = torch.zeros(N, E, dtype=torch.bool).scatter(1, idx, True)
    tpe = topk_map.sum(0)
    if m["cap"] < 0:
        return gates, topk_map, tpe, idx, topk_map
    cap = min(math.ceil(N * k / E * m["cap"]), N)
    cmask = capacity_mask(m, gates.detach(), topk_map, cap, m["B"], m["T"])
    fmap = cmask if m["pad"] else topk_map & cmask
    return gates * fmap, fmap, tpe, idx, topk_map & cmask


def expert_mlp(m, x, w1, w2):
    h = x @ w1.T
    if m["swiglu"]:
        g, u = torch.chunk(h, 2, dim=-1)
        a = torch.nn.functional.silu(g) * u
    else:
        a = torch.nn.functional.gelu(h, approximate="tanh")
    return a @ w2.T


def main():
    d = sys.argv[1]
    tol = float(sys.argv[sys.argv.index("--tol") + 1]) if "--tol" in sys.argv else 2e-5
    m = json.load(open(f"{d}/meta.json"))
    if m.get("router_only"):
        if router_only(d, m, tol):
            print("FAILED: router with limited devices")
            sys.exit(1)
        return
    N, C, E, k, F, S = m["N"], m["C"], m["E"], m["k"], m["F"], m["shared"]
    FC1 = 2 * F if m["swiglu"] else F
    x = load(d, "x", (N, C)).requires_grad_()
    wr = load(d, "router", (E, C)).requires_grad_()
    w1 = load(d, "fc1", (E, FC1, C)).requires_grad_()
    w2 = load(d, "fc2", (E, C, F)).requires_grad_()
    dout = load(d, "dout", (N, C))
    xr = x * load(d, "jitter", (N, C)) if m["jitter"] > 0 else x
    logits = xr @ wr.T
    extra = torch.zeros(())
    tracked = {}
    if m["train"] and m["z"] >= 0:
        zv = torch.mean(torch.square(torch.logsumexp(logits, dim=-1)))
        extra = extra + m["z"] * zv
        tracked["z_loss"] = zv.item()
    gates, fmap, tpe, idx, routed_kept = route(m, logits)
    if m["train"] and m["lb"] == "aux_loss":
        scores = torch.softmax(logits, dim=-1)
        aux = torch.sum(scores.sum(0) * tpe) * (E / (N * N * k))
        extra = extra + m["aux"] * aux
        tracked["load_balancing_loss"] = aux.item()
        cap1 = math.ceil(N * k / E)
        ratio = tpe.double() / cap1
        tracked["topk_expert_capacity_utilization_ratio_mean"] = ratio.mean().item()
        tracked["topk_expert_capacity_utilization_ratio_min"] = ratio.min().item()
        tracked["topk_expert_capacity_utilization_ratio_max"] = ratio.max().item()
        tracked["topk_expert_capacity_utilization_ratio_std"] = ratio.std().item()
        if m["cap"] >= 0:
            places = N * k * m["cap"]
            tracked["topk_token_drop_ratio"] = (places - routed_kept.sum().item()) / places
    if m["train"] and m["lb"] == "seq_aux_loss":
        B, T = m["B"], m["T"]
        scores = torch.softmax(logits, dim=-1).view(B, T, E)  # megadlm rows: [b, t]
        cost = fmap.view(B, T, E).sum(1).double() / (T * k / E)
        aux = (cost * scores.mean(1)).sum(1).mean()
        extra = extra + m["aux"] * aux
        tracked["load_balancing_loss"] = aux.item()
    # permute (expert-major, token order), experts, unpermute with the gates
    out = torch.zeros(N, C)
    rows = 0
    for e in range(E):
        toks = torch.nonzero(fmap[:, e]).flatten()
        rows += len(toks)
        if len(toks):
            y = expert_mlp(m, x[toks], w1[e], w2[e])
            out = out.index_add(0, toks, y * gates[toks, e].unsqueeze(1))
    if S:
        s1 = load(d, "sfc1", (2 * S if m["swiglu"] else S, C)).requires_grad_()
        s2 = load(d, "sfc2", (C, S)).requires_grad_()
        out = out + expert_mlp(m, x, s1, s2)
    obj = (out * dout).sum() + m["gscale"] * extra
    obj.backward()
    fails = []

    def check(name, got, want, t=tol):
        err = (got - want).abs().max().item() if got.numel() else 0.0
        scale = max(1.0, want.abs().max().item() if want.numel() else 0.0)
        status = "ok" if err <= t * scale else "FAIL"
        print(f"  {name:10s} max|diff| {err:.3e} (scale {scale:.3g}) {status}")
        if status != "ok":
            fails.append(name)

    c_idx = load(d, "idx", (N, k), np.int32)
    if not torch.equal(c_idx.long(), idx.long()):
        fails.append("idx")
        print("  idx differ")
    c_kept = torch.from_numpy(np.fromfile(f"{d}/kept.bin", dtype=np.uint8).reshape(N, E)).bool()
    if not torch.equal(c_kept, routed_kept):
        fails.append("kept")
        print("  kept assignments differ")
    check("out", load(d, "out", (N, C)), out.detach())
    check("din", load(d, "din", (N, C)), x.grad)
    check("drouter", load(d, "drouter", (E, C)), wr.grad)
    check("dfc1", load(d, "dfc1", (E, FC1, C)), w1.grad)
    check("dfc2", load(d, "dfc2", (E, C, F)), w2.grad)
    if S:
        check("dsfc1", load(d, "dsfc1", s1.shape), s1.grad)
        check("dsfc2", load(d, "dsfc2", s2.shape), s2.grad)
    for name, want in tracked.items():
        got = m["tracked"][name]
        ok = abs(got - want) <= tol * max(1.0, abs(want))
        print(f"  {name}: {got:.9g} vs {want:.9g} {'ok' if ok else 'FAIL'}")
        if not ok:
            fails.append(name)
    for name, got in m["tracked"].items():
        if got != -1 and name not in tracked:
            fails.append(f"{name} recorded, not expected")
    if fails:
        print("FAILED:", ", ".join(fails))
        sys.exit(1)


if __name__ == "__main__":
    main()
