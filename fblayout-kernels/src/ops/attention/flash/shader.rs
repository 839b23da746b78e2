//! The WGSL of the fused attention's four kernels on shader cores (see the parent module for
//! what each computes).
//!
//! Every kernel gives one invocation one row: a query (the forward and `dQ`) or a key (`dK`,
//! `dV`), whose head vectors it keeps in registers as `vec4<f32>`s, `⌈head_dim/4⌉` of them,
//! each loop over them unrolled here. The other side is staged in blocks of
//! [`Blocks::staged`] rows into workgroup memory, every invocation loading a few of their
//! vectors, and each invocation then walks the block, every read of it a broadcast. Scores and
//! sums are `f32`, whatever the storage.
//!
//! The causal mask bounds each loop for the whole workgroup (its last query's keys, or its
//! first key's queries), so blocks that no invocation sees are skipped, and decides per pair
//! inside; the padding mask is staged with the keys (the query-side kernels) or read once per
//! key (the key-side ones). A row that sees no key has `l = 0`: its output is 0 and it saves
//! [`NO_KEYS`] as its log-sum-exp, so that its recomputed probabilities are 0.

use std::fmt::Write as _;

use super::super::super::softmax::Mask;

/// The log-sum-exp saved for a query that sees no key: its probabilities `exp(s − L)` are 0.
pub(crate) const NO_KEYS: f32 = 3.0e38;

/// The entry points.
pub(crate) const FORWARD_ENTRY: &str = "flash_forward";
pub(crate) const GRAD_Q_ENTRY: &str = "flash_grad_q";
pub(crate) const GRAD_K_ENTRY: &str = "flash_grad_k";
pub(crate) const GRAD_V_ENTRY: &str = "flash_grad_v";
pub(crate) const GRAD_KV_ENTRY: &str = "flash_grad_kv";

/// Which kernel: the shader cores run [`Pass::SHADER`], the tensor cores [`Pass::TENSOR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// `O` and the log-sum-exp, per query.
    Forward,
    /// `dQ`, per query.
    GradQ,
    /// `dK`, per key.
    GradK,
    /// `dV`, per key.
    GradV,
    /// `dK` and `dV` together, per key (tensor cores only): the scores, probabilities and
    /// `dP` made once for both.
    GradKV,
}

impl Pass {
    /// The shader cores' kernels.
    pub(crate) const SHADER: [Pass; 4] = [Self::Forward, Self::GradQ, Self::GradK, Self::GradV];
    /// The tensor cores' kernels: the shader cores' four, and `dK` with `dV` where they are
    /// different buffers.
    pub(crate) const TENSOR: [Pass; 5] = [
        Self::Forward,
        Self::GradQ,
        Self::GradK,
        Self::GradV,
        Self::GradKV,
    ];

    pub(crate) fn entry(self) -> &'static str {
        match self {
            Self::Forward => FORWARD_ENTRY,
            Self::GradQ => GRAD_Q_ENTRY,
            Self::GradK => GRAD_K_ENTRY,
            Self::GradV => GRAD_V_ENTRY,
            Self::GradKV => GRAD_KV_ENTRY,
        }
    }

    /// Whether an invocation owns a key (else a query).
    pub(crate) fn per_key(self) -> bool {
        matches!(self, Self::GradK | Self::GradV | Self::GradKV)
    }

    /// The operands it reads, besides the padding mask `keep`.
    pub(crate) fn reads(self) -> &'static [&'static str] {
        match self {
            Self::Forward => &["q", "k", "v"],
            Self::GradQ | Self::GradK | Self::GradKV => &["q", "k", "v", "out", "lse", "dout"],
            Self::GradV => &["q", "k", "lse", "dout"],
        }
    }

    /// The operands it writes (the forward also writes `lse`).
    pub(crate) fn writes(self) -> &'static [&'static str] {
        match self {
            Self::Forward => &["out"],
            Self::GradQ => &["dq"],
            Self::GradK => &["dk"],
            Self::GradV => &["dv"],
            Self::GradKV => &["dk", "dv"],
        }
    }
}

/// The sizes a kernel is generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocks {
    /// Elements of a head.
    pub head_dim: u32,
    /// Query heads per key/value head.
    pub group: u32,
    /// Invocations of a workgroup: the rows it owns.
    pub rows: u32,
    /// Rows of the other side staged at once.
    pub staged: u32,
}

impl Blocks {
    /// Invocations per workgroup by default.
    pub(crate) const ROWS: u32 = 128;

    /// The default blocks for heads of `head_dim` under a workgroup memory of `limit` bytes:
    /// [`ROWS`](Self::ROWS) rows, and the largest of 32, 16, 8, 4 staged rows that fit, or
    /// `None`.
    pub(crate) fn fitting(head_dim: u32, group: u32, limit: u32) -> Option<Self> {
        [32, 16, 8, 4].into_iter().find_map(|staged| {
            let b = Self {
                head_dim,
                group,
                rows: Self::ROWS,
                staged,
            };
            (b.workgroup_bytes() <= u64::from(limit)).then_some(b)
        })
    }

    /// `vec4`s per head.
    pub(crate) fn vecs(&self) -> u32 {
        self.head_dim.div_ceil(4)
    }

    /// The workgroup memory of the largest kernel: two staged blocks of head vectors and two
    /// numbers per staged row.
    pub(crate) fn workgroup_bytes(&self) -> u64 {
        let s = u64::from(self.staged);
        2 * s * u64::from(self.vecs()) * 16 + 2 * s * 4
    }
}

/// How each operand is read and written: whether it has `load4`/`store4` along `head_dim`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Wide {
    pub q: bool,
    pub k: bool,
    pub v: bool,
    pub out: bool,
    /// The gradients written, in [`Pass::writes`]'s order (`dq`, `dk` or `dv`: the view of
    /// `q`, `k` or `v`; the second only for [`Pass::GradKV`]'s `dv`).
    pub grads: [bool; 2],
}

/// The WGSL body of `pass` (operands and parameters are declared by the kernel surface).
pub(crate) fn body(pass: Pass, blocks: Blocks, mask: Mask, wide: Wide) -> String {
    let mut w = prelude(pass, blocks.head_dim, mask, wide);
    let v4 = blocks.vecs();
    let staged_vecs = blocks.staged * v4;
    let (a, b) = if pass.per_key() {
        ("fa_q", "fa_do")
    } else {
        ("fa_k", "fa_v")
    };
    // `fa_x`: each staged key's mask, or each staged query's log-sum-exp; `fa_y` (dK only):
    // each staged query's `D = Σ dO ⊙ O`.
    let _ = writeln!(
        w,
        "var<workgroup> {a}: array<vec4<f32>, {staged_vecs}>;
var<workgroup> {b}: array<vec4<f32>, {staged_vecs}>;
var<workgroup> fa_x: array<f32, {s}>;",
        s = blocks.staged
    );
    if pass == Pass::GradK {
        let _ = writeln!(w, "var<workgroup> fa_y: array<f32, {}>;", blocks.staged);
    }
    w.push('\n');
    let _ = writeln!(
        w,
        "@compute @workgroup_size({rows})
fn {entry}(
    @builtin(workgroup_id) fa_wg: vec3<u32>,
    @builtin(local_invocation_index) fa_lid: u32,
) {{
    let b = fa_wg.z;
    let sq = q_dim1();
    let sk = k_dim1();",
        rows = blocks.rows,
        entry = pass.entry()
    );
    w += &match pass {
        Pass::Forward => forward(blocks),
        Pass::GradQ => grad_q(blocks),
        Pass::GradK | Pass::GradV => grad_kv(pass, blocks),
        // Built only for the tensor cores (`Pass::TENSOR`), whose body is `tensor::body`.
        Pass::GradKV => unreachable!("the shader cores run Pass::SHADER"),
    };
    w += "}\n";
    w
}

/// `for c in 0..vecs`, unrolled: `line` with `{c}` replaced by each index.
fn unrolled(vecs: u32, line: &str) -> String {
    (0..vecs)
        .map(|c| format!("    {}\n", line.replace("{c}", &c.to_string())))
        .collect()
}

/// `fa_get_<role>(b, s, h, c)`: the head vector `c` of `role` (elements past `head_dim` 0).
fn getter(role: &str, wide: bool, head_dim: u32) -> String {
    let body = if wide {
        format!("    return {role}_load4(b, s, h, c * 4u);\n")
    } else {
        let lane = |l: u32| {
            format!(
                "select(0.0, {role}_load(b, s, h, min(c * 4u + {l}u, {last}u)), c * 4u + {l}u < {head_dim}u)",
                last = head_dim - 1
            )
        };
        format!(
            "    return vec4<f32>({}, {}, {}, {});\n",
            lane(0),
            lane(1),
            lane(2),
            lane(3)
        )
    };
    format!("fn fa_get_{role}(b: u32, s: u32, h: u32, c: u32) -> vec4<f32> {{\n{body}}}\n")
}

/// `fa_put_<role>(b, s, h, c, x)`: stores head vector `c` of `role` (lanes past `head_dim`
/// dropped).
fn putter(role: &str, wide: bool, head_dim: u32) -> String {
    let body = if wide {
        format!("    {role}_store4(b, s, h, c * 4u, x);\n")
    } else {
        (0..4)
            .map(|l| {
                format!(
                    "    if (c * 4u + {l}u < {head_dim}u) {{\n        {role}_store(b, s, h, c * 4u + {l}u, x[{l}]);\n    }}\n"
                )
            })
            .collect()
    };
    format!("fn fa_put_{role}(b: u32, s: u32, h: u32, c: u32, x: vec4<f32>) {{\n{body}}}\n")
}

/// `fa_causal(i, j)`: whether query `i` sees key `j` by position; `fa_keeps(b, j)`: whether
/// key `j` of sequence `b` is a token; the bounds of the causal loops.
fn masks(mask: Mask) -> String {
    let causal = match mask {
        Mask::Causal { .. } => "return i32(j) <= i32(i) + params.offset;",
        Mask::None | Mask::Keys => "return true;",
    };
    let keeps = match mask {
        Mask::Keys => "return keep_load(b, j) != 0u;",
        Mask::None | Mask::Causal { .. } => "return true;",
    };
    // The keys a block of queries ending at `last` sees: up to `last + offset`; the first
    // query a block of keys starting at `first` is seen by: `first − offset`.
    let (key_end, query_start) = match mask {
        Mask::Causal { .. } => (
            "return u32(clamp(i32(last) + params.offset + 1, 0, i32(sk)));",
            "return u32(clamp(i32(first) - params.offset, 0, i32(sq)));",
        ),
        Mask::None | Mask::Keys => ("return sk;", "return 0u;"),
    };
    format!(
        "fn fa_causal(i: u32, j: u32) -> bool {{
    {causal}
}}
fn fa_keeps(b: u32, j: u32) -> bool {{
    {keeps}
}}
fn fa_key_end(last: u32, sk: u32) -> u32 {{
    {key_end}
}}
fn fa_query_start(first: u32, sq: u32) -> u32 {{
    {query_start}
}}
"
    )
}

/// The lines that stage keys `j0..j0 + staged` of key/value head `kvh` (`fa_k`, and `fa_v`
/// where `values`) and whether each is a token in range (`fa_x`, 1 or 0).
fn stage_keys(blocks: Blocks, values: bool) -> String {
    let (s, v4, rows) = (blocks.staged, blocks.vecs(), blocks.rows);
    let v = if values {
        "            fa_v[e] = fa_get_v(b, j, kvh, e % {v4}u);\n".replace("{v4}", &v4.to_string())
    } else {
        String::new()
    };
    format!(
        "        workgroupBarrier();
        for (var e = fa_lid; e < {n}u; e = e + {rows}u) {{
            let j = min(j0 + e / {v4}u, sk - 1u);
            fa_k[e] = fa_get_k(b, j, kvh, e % {v4}u);
{v}        }}
        if (fa_lid < {s}u) {{
            let j = j0 + fa_lid;
            fa_x[fa_lid] = select(0.0, 1.0, j < sk && fa_keeps(b, min(j, sk - 1u)));
        }}
        workgroupBarrier();
",
        n = s * v4
    )
}

/// The lines that open a kernel of one query an invocation: its head `h` (and key/value head
/// `kvh`), its query `i` (`ii` clamped into the sequence, for loads) and the keys its
/// workgroup sees (`kend`).
fn query_rows(blocks: Blocks) -> String {
    let (rows, group) = (blocks.rows, blocks.group);
    format!(
        "    let h = fa_wg.y;
    let kvh = h / {group}u;
    let i0 = fa_wg.x * {rows}u;
    let i = i0 + fa_lid;
    let ii = min(i, sq - 1u);
    let kend = fa_key_end(min(i0 + {rows}u, sq) - 1u, sk);
"
    )
}

/// The forward: an online softmax over blocks of keys.
fn forward(blocks: Blocks) -> String {
    let (v4, s) = (blocks.vecs(), blocks.staged);
    format!(
        "{rows_of}    var q: array<vec4<f32>, {v4}>;
    var o: array<vec4<f32>, {v4}>;
{load_q}    var m = FA_NEG;
    var l = 0.0;
    for (var j0 = 0u; j0 < kend; j0 = j0 + {s}u) {{
{stage}        var sc: array<f32, {s}>;
        var mb = m;
        for (var r = 0u; r < {s}u; r = r + 1u) {{
            var acc = vec4<f32>(0.0);
{dot}            let seen = fa_x[r] != 0.0 && fa_causal(i, j0 + r);
            sc[r] = select(FA_NEG, acc.x + acc.y + acc.z + acc.w, seen);
            mb = max(mb, sc[r]);
        }}
        let corr = exp(m - mb);
        l = l * corr;
{rescale}        for (var r = 0u; r < {s}u; r = r + 1u) {{
            let p = select(0.0, exp(sc[r] - mb), sc[r] > FA_LOW);
            l = l + p;
{accumulate}        }}
        m = mb;
    }}
    if (i < sq) {{
        let inv = select(0.0, 1.0 / l, l > 0.0);
{store}        lse_store(b, h, i, select(FA_NO_KEYS, m + log(l), l > 0.0));
    }}
",
        rows_of = query_rows(blocks),
        load_q = unrolled(v4, "q[{c}] = fa_get_q(b, ii, h, {c}u) * params.scale;"),
        stage = stage_keys(blocks, true),
        dot = indent(
            &unrolled(
                v4,
                &format!("acc = fma(q[{{c}}], fa_k[r * {v4}u + {{c}}u], acc);")
            ),
            8
        ),
        rescale = indent(&unrolled(v4, "o[{c}] = o[{c}] * corr;"), 4),
        accumulate = indent(
            &unrolled(
                v4,
                &format!("o[{{c}}] = fma(vec4<f32>(p), fa_v[r * {v4}u + {{c}}u], o[{{c}}]);")
            ),
            8
        ),
        store = indent(&unrolled(v4, "fa_put_out(b, i, h, {c}u, o[{c}] * inv);"), 4),
    )
}

/// `dQ = scale · Σ_j dS_ij K_j` per query, `dS = P ⊙ (dP − D)`, `D = Σ dO ⊙ O`.
fn grad_q(blocks: Blocks) -> String {
    let (v4, s) = (blocks.vecs(), blocks.staged);
    format!(
        "{rows_of}    var q: array<vec4<f32>, {v4}>;
    var g: array<vec4<f32>, {v4}>;
    var dq: array<vec4<f32>, {v4}>;
    var dd4 = vec4<f32>(0.0);
{load}    let dd = dd4.x + dd4.y + dd4.z + dd4.w;
    let lse = lse_load(b, h, ii);
    for (var j0 = 0u; j0 < kend; j0 = j0 + {s}u) {{
{stage}        for (var r = 0u; r < {s}u; r = r + 1u) {{
            var sa = vec4<f32>(0.0);
            var pa = vec4<f32>(0.0);
{dots}            let seen = fa_x[r] != 0.0 && fa_causal(i, j0 + r);
            let p = select(0.0, exp((sa.x + sa.y + sa.z + sa.w) * params.scale - lse), seen);
            let ds = p * (pa.x + pa.y + pa.z + pa.w - dd);
{accumulate}        }}
    }}
    if (i < sq) {{
{store}    }}
",
        rows_of = query_rows(blocks),
        load = unrolled(
            v4,
            "q[{c}] = fa_get_q(b, ii, h, {c}u);\n    g[{c}] = fa_get_dout(b, ii, h, {c}u);\n    dd4 = fma(g[{c}], fa_get_out(b, ii, h, {c}u), dd4);"
        ),
        stage = stage_keys(blocks, true),
        dots = indent(
            &unrolled(
                v4,
                &format!(
                    "sa = fma(q[{{c}}], fa_k[r * {v4}u + {{c}}u], sa);\n            pa = fma(g[{{c}}], fa_v[r * {v4}u + {{c}}u], pa);"
                )
            ),
            8
        ),
        accumulate = indent(
            &unrolled(
                v4,
                &format!("dq[{{c}}] = fma(vec4<f32>(ds), fa_k[r * {v4}u + {{c}}u], dq[{{c}}]);")
            ),
            8
        ),
        store = indent(
            &unrolled(v4, "fa_put_dq(b, i, h, {c}u, dq[{c}] * params.scale);"),
            4
        ),
    )
}

/// `dK = scale · Σ_i dS_ij Q_i` or `dV = Σ_i P_ij dO_i` per key, over the queries of every
/// head of its group.
fn grad_kv(pass: Pass, blocks: Blocks) -> String {
    let (v4, rows, s, group) = (blocks.vecs(), blocks.rows, blocks.staged, blocks.group);
    let grad_k = pass == Pass::GradK;
    let (out, factor) = if grad_k {
        ("dk", " * params.scale")
    } else {
        ("dv", "")
    };
    // What each invocation holds of its key: K (and for dK, V).
    let load = if grad_k {
        unrolled(
            v4,
            "kk[{c}] = fa_get_k(b, jj, kvh, {c}u);\n    vv[{c}] = fa_get_v(b, jj, kvh, {c}u);",
        )
    } else {
        unrolled(v4, "kk[{c}] = fa_get_k(b, jj, kvh, {c}u);")
    };
    // D = Σ dO ⊙ O of each staged query (dK only), from the staged dO.
    let dd = if grad_k {
        format!(
            "        if (fa_lid < {s}u) {{
            let i = min(i0 + fa_lid, sq - 1u);
            var dd4 = vec4<f32>(0.0);
{sum}            fa_y[fa_lid] = dd4.x + dd4.y + dd4.z + dd4.w;
        }}
        workgroupBarrier();
",
            sum = indent(
                &unrolled(
                    v4,
                    &format!(
                        "dd4 = fma(fa_do[fa_lid * {v4}u + {{c}}u], fa_get_out(b, i, h, {{c}}u), dd4);"
                    )
                ),
                8
            )
        )
    } else {
        String::new()
    };
    let pair = if grad_k {
        format!(
            "            var pa = vec4<f32>(0.0);
{dot}            let ds = p * (pa.x + pa.y + pa.z + pa.w - fa_y[r]);
{acc}",
            dot = indent(
                &unrolled(
                    v4,
                    &format!("pa = fma(fa_do[r * {v4}u + {{c}}u], vv[{{c}}], pa);")
                ),
                8
            ),
            acc = indent(
                &unrolled(
                    v4,
                    &format!(
                        "acc[{{c}}] = fma(vec4<f32>(ds), fa_q[r * {v4}u + {{c}}u], acc[{{c}}]);"
                    )
                ),
                8
            ),
        )
    } else {
        indent(
            &unrolled(
                v4,
                &format!("acc[{{c}}] = fma(vec4<f32>(p), fa_do[r * {v4}u + {{c}}u], acc[{{c}}]);"),
            ),
            8,
        )
    };
    format!(
        "    let kvh = fa_wg.y;
    let j0w = fa_wg.x * {rows}u;
    let j = j0w + fa_lid;
    let jj = min(j, sk - 1u);
    let key = j < sk && fa_keeps(b, jj);
    let istart = fa_query_start(j0w, sq);
    var kk: array<vec4<f32>, {v4}>;
{vv}    var acc: array<vec4<f32>, {v4}>;
{load}    for (var gi = 0u; gi < {group}u; gi = gi + 1u) {{
        let h = kvh * {group}u + gi;
        for (var i0 = istart; i0 < sq; i0 = i0 + {s}u) {{
            workgroupBarrier();
            for (var e = fa_lid; e < {n}u; e = e + {rows}u) {{
                let i = min(i0 + e / {v4}u, sq - 1u);
                fa_q[e] = fa_get_q(b, i, h, e % {v4}u);
                fa_do[e] = fa_get_dout(b, i, h, e % {v4}u);
            }}
            if (fa_lid < {s}u) {{
                fa_x[fa_lid] = lse_load(b, h, min(i0 + fa_lid, sq - 1u));
            }}
            workgroupBarrier();
{dd}            for (var r = 0u; r < {s}u; r = r + 1u) {{
                let i = i0 + r;
                var sa = vec4<f32>(0.0);
{sdot}                let seen = key && i < sq && fa_causal(i, j);
                let p = select(0.0, exp((sa.x + sa.y + sa.z + sa.w) * params.scale - fa_x[r]), seen);
{pair}            }}
        }}
    }}
    if (j < sk) {{
{store}    }}
",
        n = s * v4,
        vv = if grad_k {
            format!("    var vv: array<vec4<f32>, {v4}>;\n")
        } else {
            String::new()
        },
        dd = indent(&dd, 4),
        sdot = indent(
            &unrolled(
                v4,
                &format!("sa = fma(fa_q[r * {v4}u + {{c}}u], kk[{{c}}], sa);")
            ),
            12
        ),
        pair = indent(&pair, 4),
        store = indent(
            &unrolled(v4, &format!("fa_put_{out}(b, j, kvh, {{c}}u, acc[{{c}}]{factor});")),
            4
        ),
    )
}

/// `text` with every line indented by `n` more spaces.
pub(super) fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// What every kernel of `pass` starts with, on shader or tensor cores: the constants, the
/// getters of the head vectors it reads, the putter of the one it writes, and the masks.
pub(super) fn prelude(pass: Pass, head_dim: u32, mask: Mask, wide: Wide) -> String {
    let mut w = String::new();
    let _ = writeln!(
        w,
        "const FA_NEG: f32 = -3.0e38;\nconst FA_LOW: f32 = -1.0e38;"
    );
    let _ = writeln!(w, "const FA_NO_KEYS: f32 = {NO_KEYS:e};");
    let roles: Vec<(&str, bool)> = match pass {
        Pass::Forward => vec![("q", wide.q), ("k", wide.k), ("v", wide.v)],
        Pass::GradV => vec![("q", wide.q), ("k", wide.k), ("dout", wide.out)],
        Pass::GradQ | Pass::GradK | Pass::GradKV => vec![
            ("q", wide.q),
            ("k", wide.k),
            ("v", wide.v),
            ("out", wide.out),
            ("dout", wide.out),
        ],
    };
    for (role, wide) in roles {
        w += &getter(role, wide, head_dim);
    }
    for (at, written) in pass.writes().iter().enumerate() {
        let written_wide = match pass {
            Pass::Forward => wide.out,
            _ => wide.grads[at],
        };
        w += &putter(written, written_wide, head_dim);
    }
    w += &masks(mask);
    w
}
