"""Independent numpy implementations of the corpus kernels: the oracle for their upstream reference kernels.

``ORACLES[task_name](inputs, scalars, sizes)`` returns the expected content of every output buffer (intent "out"
or "inout") as a flat array of the buffer's dtype, the convention of tests/support/numpy_refs.py. ``inputs`` are the
seeded host arrays the harness uploads (``kernelcast.tools.hardware.harness.make_inputs``; an "inout" buffer's initial
content is among them), ``scalars`` the by-value arguments, ``sizes`` the named problem sizes. Floating-point
results are computed in float64 and rounded once, unless a kernel's result is defined by float32 steps (noted).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

Inputs = Mapping[str, np.ndarray]
Scalars = Mapping[str, Any]
Sizes = Mapping[str, int]
Oracle = Callable[[Inputs, Scalars, Sizes], dict[str, np.ndarray]]
ORACLES: dict[str, Oracle] = {}


def oracle(name: str) -> Callable[[Oracle], Oracle]:
    def register(fn: Oracle) -> Oracle:
        ORACLES[name] = fn
        return fn
    return register


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).ravel()


def _d(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


# ---- Rodinia ------------------------------------------------------------------------------------------------
@oracle("rodinia_kmeans_assign")
def kmeans_assign(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    p, c, f = sizes["P"], sizes["C"], sizes["F"]
    feature = _d(inputs["feature"]).reshape(f, p).T
    clusters = _d(inputs["clusters"]).reshape(c, f)
    dist = ((feature[:, None, :] - clusters[None, :, :]) ** 2).sum(axis=2)
    return {"membership": dist.argmin(axis=1).astype(np.int32)}  # first minimum, as the kernel's strict '<'


@oracle("rodinia_kmeans_swap")
def kmeans_swap(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    return {"feature_swap": _f32(inputs["feature"].reshape(sizes["P"], sizes["F"]).T)}


@oracle("rodinia_hotspot3d")
def hotspot3d(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    nx, ny, nz = sizes["NX"], sizes["NY"], sizes["NZ"]
    t = _d(inputs["tIn"]).reshape(nz, ny, nx)
    p = _d(inputs["p"]).reshape(nz, ny, nx)
    pad = np.pad(t, 1, mode="edge")  # every neighbour outside the grid is the cell itself
    s = {k: float(scalars[k]) for k in ("sdc", "ce", "cw", "cn", "cs", "ct", "cb", "cc")}
    out = (s["cc"] * t + s["cw"] * pad[1:-1, 1:-1, :-2] + s["ce"] * pad[1:-1, 1:-1, 2:]
           + s["cs"] * pad[1:-1, 2:, 1:-1] + s["cn"] * pad[1:-1, :-2, 1:-1]
           + s["cb"] * pad[:-2, 1:-1, 1:-1] + s["ct"] * pad[2:, 1:-1, 1:-1] + s["sdc"] * p + s["ct"] * 80.0)
    return {"tOut": _f32(out)}


@oracle("rodinia_gaussian_fan2")
def gaussian_fan2(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    n, t = sizes["S"], int(scalars["t"])
    m = _d(inputs["m_dev"]).reshape(n, n)
    a = _d(inputs["a_dev"]).reshape(n, n).copy()
    b = _d(inputs["b_dev"]).copy()
    a[t + 1:, t:] -= m[t + 1:, t][:, None] * a[t, t:][None, :]
    b[t + 1:] -= m[t + 1:, t] * b[t]
    return {"a_dev": _f32(a), "b_dev": _f32(b)}


@oracle("rodinia_pathfinder")
def pathfinder(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    cols, steps = sizes["C"], sizes["ITER"]
    wall = inputs["gpuWall"].astype(np.int64).reshape(steps, cols)
    row = inputs["gpuSrc"].astype(np.int64)
    for i in range(steps):  # the dynamic program, neighbours clamped at the edges
        left = np.concatenate([row[:1], row[:-1]])
        right = np.concatenate([row[1:], row[-1:]])
        row = np.minimum(np.minimum(left, row), right) + wall[i]
    debug = inputs["outputBuffer"].copy()
    small = 256 - 2 * steps  # columns each work-group of 256 finishes
    blocks = -(-cols // small)
    for bx in range(1, blocks):  # work-item 11 of every group whose column is inside the grid marks gpuSrc there
        x = small * bx - steps + 11
        if 0 <= x < cols:
            debug[inputs["gpuSrc"][x]] = 1
    return {"gpuResults": row.astype(np.int32), "outputBuffer": debug}


@oracle("rodinia_backprop_forward")
def backprop_forward(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    n = sizes["IN"]
    hid = 16
    blocks = n // 16
    w = inputs["input_hidden_cuda"].astype(np.float32).reshape(n + 1, hid + 1).copy()
    x = inputs["input_cuda"].astype(np.float32)
    # the tile of block by: rows 16 by + 1 .. 16 by + 16, columns 1..16; scaled by the row's input
    tile = w[1:, 1:].reshape(blocks, 16, 16) * x[1:].reshape(blocks, 16, 1)
    tile = tile + tile  # the kernel's first step (i = 1) adds each row to itself
    for step in (2, 4, 8, 16):  # then rows ty % step == 0 add row ty + step / 2 (float32 steps, as the kernel)
        tile[:, ::step] = tile[:, ::step] + tile[:, step // 2::step]
    w[1:, 1:] = tile.reshape(n, 16)
    partial = tile[:, 0, :].reshape(-1)  # hidden_partial_sum[by * hid + ty] = tile row 0, column ty
    return {"input_hidden_cuda": _f32(w), "hidden_partial_sum": _f32(partial)}


@oracle("rodinia_backprop_adjust")
def backprop_adjust(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    n = sizes["IN"]
    eta = momentum = 0.3
    delta, ly = _d(inputs["delta"]), _d(inputs["ly"])
    w = _d(inputs["w"]).reshape(n + 1, 17).copy()
    oldw = _d(inputs["oldw"]).reshape(n + 1, 17).copy()
    change = eta * delta[None, 1:17] * ly[1:, None] + momentum * oldw[1:, 1:17]
    w[1:, 1:17] += change
    oldw[1:, 1:17] = change
    first = eta * delta[1:17] + momentum * oldw[0, 1:17]
    w[0, 1:17] += first
    oldw[0, 1:17] = first
    return {"w": _f32(w), "oldw": _f32(oldw)}


@oracle("rodinia_cfd_time_step")
def cfd_time_step(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    n = sizes["N"]
    factor = _d(inputs["step_factors"]) / (3 + 1 - int(scalars["j"]))  # RK = 3
    old = _d(inputs["old_variables"]).reshape(5, n)
    flux = _d(inputs["fluxes"]).reshape(5, n)
    return {"variables": _f32(old + factor[None, :] * flux)}


# ---- SHOC ---------------------------------------------------------------------------------------------------
@oracle("shoc_sort_reduce")
def sort_reduce(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    n, groups, shift = sizes["N"], sizes["G"], int(scalars["shift"])
    digits = (inputs["in"].astype(np.uint64) >> shift) & 0xF
    region = ((n // 4) // groups) * 4
    counts = np.zeros((16, groups), np.uint32)
    for g in range(groups):
        stop = n if g == groups - 1 else (g + 1) * region
        counts[:, g] = np.bincount(digits[g * region:stop].astype(np.int64), minlength=16)
    return {"isums": counts.ravel()}


@oracle("shoc_sort_top_scan")
def sort_top_scan(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    flat = inputs["isums"].astype(np.uint64)  # digit-major: one exclusive scan over all 16 x n counts
    scanned = np.concatenate([[0], np.cumsum(flat)[:-1]])
    return {"isums": (scanned % 2**32).astype(np.uint32)}


@oracle("shoc_md5hash")
def md5hash(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    keyspace, length, vals = sizes["K"], int(scalars["byteLength"]), int(scalars["valsPerByte"])
    wanted = tuple(int(scalars[f"searchDigest{i}"]) for i in range(4))
    index = np.array(inputs["foundIndex"]).copy()
    key_out = np.array(inputs["foundKey"]).copy()
    digest_out = np.array(inputs["foundDigest"]).copy()
    for k in range(keyspace):  # every key of the space, hashed by Python's MD5
        key = bytes((k // vals ** i) % vals for i in range(8))
        digest = struct.unpack("<4I", hashlib.md5(key[:length]).digest())
        if digest == wanted:
            index[0] = k
            key_out[:] = np.frombuffer(key, np.uint8)
            digest_out[:] = digest
    return {"foundIndex": index, "foundKey": key_out, "foundDigest": digest_out}


# ---- Parboil ------------------------------------------------------------------------------------------------
def _sgemm(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    a = _d(inputs["A"]).reshape(k, m)
    b = _d(inputs["B"]).reshape(k, n)
    c = _d(inputs["C"]).reshape(n, m)
    return {"C": _f32(float(scalars["beta"]) * c + float(scalars["alpha"]) * (b.T @ a))}


ORACLES["parboil_sgemm_base"] = _sgemm
ORACLES["parboil_sgemm_nvidia"] = _sgemm


@oracle("parboil_stencil_mxpa")
def stencil_mxpa(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    nx, ny, nz = sizes["NX"], sizes["NY"], sizes["NZ"]
    a = _d(inputs["A0"]).reshape(nz, ny, nx)
    out = _d(inputs["Anext"]).reshape(nz, ny, nx).copy()
    c0, c1 = float(scalars["c0"]), float(scalars["c1"])
    out[1:-1, 1:-1, 1:-1] = c1 * (a[2:, 1:-1, 1:-1] + a[:-2, 1:-1, 1:-1] + a[1:-1, 2:, 1:-1] + a[1:-1, :-2, 1:-1]
                                  + a[1:-1, 1:-1, 2:] + a[1:-1, 1:-1, :-2]) - c0 * a[1:-1, 1:-1, 1:-1]
    return {"Anext": _f32(out)}


def _spmv_jds(per: int) -> Oracle:
    def spmv(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
        d = sizes["D"]
        data, index, x = _d(inputs["d_data"]), inputs["d_index"].astype(np.int64), _d(inputs["x_vec"])
        ptr = inputs["jds_ptr_int"].astype(np.int64)
        bound = np.repeat(inputs["sh_zcnt_int"].astype(np.int64), per)[:d]
        rows = np.arange(d)
        total = np.zeros(d)
        for k in range(len(ptr)):  # diagonal k of the rows whose group has more than k
            j = ptr[k] + rows
            total += np.where(k < bound, data[j] * x[index[j]], 0.0)
        out = np.empty(d)
        out[inputs["d_perm"].astype(np.int64)] = total
        return {"dst_vector": _f32(out)}
    return spmv


ORACLES["parboil_spmv_jds_naive"] = _spmv_jds(32)
ORACLES["parboil_spmv_jds"] = _spmv_jds(32)
ORACLES["parboil_spmv_jds_vec"] = _spmv_jds(64)


@oracle("parboil_uniform_add")
def uniform_add(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    data = inputs["dataBase"].astype(np.uint64)
    inter = np.repeat(inputs["interBase"].astype(np.uint64), 512)[:data.size]  # groups of 256 add to 512 each
    return {"dataBase": ((data + inter) % 2**32).astype(np.uint32)}


@oracle("parboil_scan_l1")
def scan_l1(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    blocks = inputs["dataBase"].astype(np.uint64).reshape(-1, 512)
    inclusive = np.cumsum(blocks, axis=1)
    exclusive = inclusive - blocks
    return {"dataBase": (exclusive.ravel() % 2**32).astype(np.uint32),
            "interBase": (inclusive[:, -1] % 2**32).astype(np.uint32)}


# ---- Hetero-Mark --------------------------------------------------------------------------------------------
def _xtime(a: np.ndarray) -> np.ndarray:
    return ((a.astype(np.uint16) << 1) & 0xFF).astype(np.uint8) ^ np.where(a & 0x80, 0x1B, 0).astype(np.uint8)


@oracle("heteromark_aes")
def aes(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    state = inputs["input"].astype(np.uint8).reshape(-1, 16).copy()
    sbox = inputs["s"].astype(np.uint8)
    words = inputs["expanded_key"].astype(np.uint32)
    key_bytes = words.view(np.uint8).reshape(-1, 4)[:, ::-1].reshape(-1)  # each word's bytes, high byte first
    shift = np.array([0, 5, 10, 15, 4, 9, 14, 3, 8, 13, 2, 7, 12, 1, 6, 11])

    def add_round_key(st: np.ndarray, rnd: int) -> np.ndarray:
        return st ^ key_bytes[16 * rnd:16 * rnd + 16][None, :]

    def mix_columns(st: np.ndarray) -> np.ndarray:
        out = st.copy()
        for i in range(4):
            a = [st[:, 4 * i + c] for c in range(4)]
            b = [_xtime(x) for x in a]
            out[:, 4 * i + 0] = b[0] ^ a[3] ^ a[2] ^ b[1] ^ a[1]
            out[:, 4 * i + 1] = b[1] ^ a[0] ^ a[3] ^ b[2] ^ a[2]
            out[:, 4 * i + 2] = b[2] ^ a[1] ^ a[0] ^ b[3] ^ a[3]
            out[:, 4 * i + 3] = b[3] ^ a[2] ^ a[1] ^ b[0] ^ a[0]
        return out

    state = add_round_key(state, 0)
    for rnd in range(1, 14):
        state = mix_columns(sbox[state][:, shift])
        state = add_round_key(state, rnd)
    state = add_round_key(sbox[state][:, shift], 14)
    return {"input": state.ravel()}


@oracle("heteromark_be")
def be(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    frame = inputs["frame"].astype(np.uint8)
    bg = inputs["bg"].astype(np.float32)
    f = frame.astype(np.float32)
    diff = np.where(f > bg, f - bg, bg - f).astype(np.uint32)  # float32 difference, truncated, as the kernel
    fg = np.where(diff > int(scalars["threshold"]), frame, 0).astype(np.uint8)
    alpha = float(scalars["alpha"])
    new_bg = _d(bg) * (1 - np.float64(np.float32(alpha))) + _d(f) * np.float64(np.float32(alpha))
    return {"fg": fg, "bg": _f32(new_bg)}


def _phi(x: np.ndarray) -> np.ndarray:
    c1, c2, c3, c4, c5 = 0.319381530, -0.356563782, 1.781477937, -1.821255978, 1.330274429
    t = 1.0 / (1.0 + 0.2316419 * np.abs(x))
    y = 1.0 - 0.398942280 * np.exp(-x * x / 2.0) * t * (c1 + t * (c2 + t * (c3 + t * (c4 + t * c5))))
    return np.where(x < 0, 1.0 - y, y)


@oracle("heteromark_bs")
def bs(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    r = _d(inputs["rand_array"])
    s = 10.0 * r + 100.0 * (1.0 - r)
    k = s
    t = 1.0 * r + 10.0 * (1.0 - r)
    rate = 0.01 * r + 0.05 * (1.0 - r)
    sigma = 0.01 * r + 0.10 * (1.0 - r)
    sst = sigma * np.sqrt(t)
    d1 = (np.log(s / k) + (rate + sigma * sigma / 2.0) * t) / sst
    d2 = d1 - sst
    kexp = k * np.exp(-rate * t)
    return {"d_call_price_": _f32(s * _phi(d1) - kexp * _phi(d2)),
            "d_put_price_": _f32(kexp * _phi(-d2) - s * _phi(-d1))}


@oracle("heteromark_fir")
def fir(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    n, taps = sizes["N"], sizes["T"]
    coeff, x, history = _d(inputs["coeff"]), _d(inputs["input"]), _d(inputs["history"])
    # sample tid - i, where the samples before 0 are history[taps + (tid - i)]
    signal = np.concatenate([history[:taps], x])  # signal[taps + j]: x[j] for j >= 0, history[taps + j] before
    out = np.zeros(n)
    for i in range(taps):
        out += coeff[i] * signal[taps - i:taps - i + n]
    return {"output": _f32(out)}


@oracle("heteromark_ga")
def ga(inputs: Inputs, scalars: Scalars, sizes: Sizes) -> dict[str, np.ndarray]:
    length, q, cm, th = sizes["L"], sizes["Q"], sizes["CM"], sizes["TH"]
    target, query = inputs["device_target"], inputs["device_query"]
    windows_t = np.lib.stride_tricks.sliding_window_view(target, cm)[:length]  # [L, CM]
    windows_q = np.lib.stride_tricks.sliding_window_view(query, cm)[:q - cm + 1]  # [Q - CM + 1, CM]
    matched = np.zeros(length, bool)
    for window in windows_q:
        matched |= (windows_t != window[None, :]).sum(axis=1) < th
    result = inputs["device_batch_result"].copy()
    result[matched] = 1
    return {"device_batch_result": result}
