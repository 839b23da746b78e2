//! The WGSL of the fused attention's four kernels on tensor cores (cooperative matrices), for
//! `f16` tensors on a device with 16×16×16 `f16` fragments summing in `f32`, subgroups of 32
//! lanes and subgroup barriers. They compute what the shader-core kernels of the `shader`
//! module compute (see the parent module), with the same operands, entry points and grids; only
//! the workgroup's rows differ ([`Tiles::ROWS`]).
//!
//! A workgroup is [`Tiles::SUBGROUPS`] subgroups, each owning 16 rows (queries, or keys for
//! `dK` and `dV`), whose head vectors it holds as `A` fragments. The other side is staged in
//! blocks of [`Tiles::BLOCK`] rows, as `f16`, into workgroup memory by every lane, and read
//! from there as `B` fragments: as stored for the products with `V`, `dO` or `Q` (`coopLoadT`),
//! transposed for the scores (`coopLoad`, so `Kᵀ` and `Qᵀ` cost nothing).
//!
//! Per block a subgroup multiplies its scores on tensor cores, stores them into its own scratch
//! in workgroup memory and works on them there, two lanes a row: the forward's online softmax
//! (each lane holds half its row's output in `f32` registers and rescales it when the row's
//! maximum grows; the two halves of a row meet by `subgroupShuffleXor`), the backward's
//! `P = exp(s·S − lse)` and `dS = P ⊙ (dP − D)`. The probabilities (or `dS`) go back as `f16`
//! into the subgroup's rows of workgroup memory and multiply the staged block on tensor cores:
//! `P·V` (added to the output in registers), `dS·K` (`dQ`), `dSᵀ·Q` (`dK`), `Pᵀ·dO` (`dV`).
//! The backward's sums stay in accumulator fragments across every block; they go out through
//! the scratch and the written tensor's view at the end.
//!
//! Only the subgroup that owns a scratch reads it, so it waits with `subgroupBarrier()`; the
//! staged blocks are shared and wait with `workgroupBarrier()`. Strides and offsets of the
//! fragment loads are `let`s (naga 30's SPIR-V writer needs them so), counted in the
//! `vec4<f16>`s the staged rows are made of.

use std::fmt::Write as _;

use fblayout_core::kernel::KernelSource;
use fblayout_core::layout::View;

use super::super::super::error::OpError;
use super::super::super::softmax::Mask;
use super::super::Attention;
use super::shader::{Pass, Wide, indent, prelude};
use super::{Cores, TENSOR_FEATURES, source};

/// The tensor-core kernels' WGSL for `views` (`[q, k, v, out, lse]`), before validation and
/// without a device, in [`Pass::TENSOR`]'s order (forward, `dQ`, `dK`, `dV`, `dK` with `dV`):
/// for the crate's tests, which pass them through naga's validator and SPIR-V writer (reached
/// through [`__private`](crate::__private)). `None` where heads of `head_dim` are not a
/// multiple of 16 up to [`TENSOR_BLOCK`](super::TENSOR_BLOCK).
pub fn kernel_sources(
    views: &[View; 5],
    keep: Option<&View>,
    attention: Attention,
    head_dim: u32,
) -> Result<Option<Vec<KernelSource>>, OpError> {
    let Some(tiles) = Tiles::of(head_dim, attention.group()?) else {
        return Ok(None);
    };
    Pass::TENSOR
        .iter()
        .map(|&pass| {
            source(pass, views, keep, attention, Cores::Tensor(tiles))
                .map(|s| s.features(TENSOR_FEATURES))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The sizes the tensor-core kernels are generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tiles {
    /// Elements of a head: a multiple of 16, at most [`Tiles::MAX_HEAD_DIM`].
    pub head_dim: u32,
    /// Query heads per key/value head.
    pub group: u32,
}

impl Tiles {
    /// Subgroups of a workgroup.
    pub(crate) const SUBGROUPS: u32 = 4;
    /// Lanes of a subgroup the kernels are written for.
    pub(crate) const LANES: u32 = 32;
    /// Rows a workgroup owns: 16 per subgroup.
    pub(crate) const ROWS: u32 = 16 * Self::SUBGROUPS;
    /// Rows of the other side staged at a time.
    pub(crate) const BLOCK: u32 = 64;
    /// The largest head: a subgroup's rows of workgroup memory hold a head or a block.
    pub(crate) const MAX_HEAD_DIM: u32 = Self::BLOCK;

    /// The tiles for heads of `head_dim` where the kernels take them.
    pub(crate) fn of(head_dim: u32, group: u32) -> Option<Self> {
        (head_dim > 0 && head_dim.is_multiple_of(16) && head_dim <= Self::MAX_HEAD_DIM)
            .then_some(Self { head_dim, group })
    }

    /// Invocations of a workgroup.
    pub(crate) fn invocations() -> u32 {
        Self::SUBGROUPS * Self::LANES
    }

    /// `f16` elements of a staged row (a head and 8 spare, so that rows start on different
    /// banks and stay 16-byte aligned).
    fn staged_row(&self) -> u32 {
        self.head_dim + 8
    }

    /// `f16` elements of a row of a subgroup's own rows (a head, or a block of probabilities).
    fn own_row(&self) -> u32 {
        self.head_dim.max(Self::BLOCK) + 8
    }

    /// `f32` elements of a subgroup's scratch: the forward's scores of a whole block (rows of
    /// [`SCORE_ROW`]), the backward's two 16×16 fragments.
    fn scratch(pass: Pass) -> u32 {
        match pass {
            Pass::Forward => 16 * SCORE_ROW,
            _ => 2 * 256,
        }
    }

    /// Sets of a subgroup's own rows of `pass`: two for [`Pass::GradKV`] (`Pᵀ` and `dSᵀ`).
    fn own_sets(pass: Pass) -> u32 {
        if pass == Pass::GradKV { 2 } else { 1 }
    }

    /// Bytes of workgroup memory the kernel of `pass` declares.
    pub(crate) fn workgroup_bytes(&self, pass: Pass) -> u64 {
        let staged = 2 * Self::BLOCK * self.staged_row() * 2;
        let numbers = 2 * Self::BLOCK * 4;
        let own = Self::SUBGROUPS
            * (Self::own_sets(pass) * 16 * self.own_row() * 2 + Self::scratch(pass) * 4);
        u64::from(staged + numbers + own)
    }

    /// The largest of the kernels' workgroup memory.
    pub(crate) fn max_workgroup_bytes(&self) -> u64 {
        Pass::TENSOR
            .iter()
            .map(|&p| self.workgroup_bytes(p))
            .max()
            .unwrap_or(0)
    }

    /// `vec4`s per head.
    fn vecs(&self) -> u32 {
        self.head_dim / 4
    }

    /// 16-wide slices of a head.
    fn slices(&self) -> u32 {
        self.head_dim / 16
    }
}

/// `f32` elements of a row of the forward's scores in the scratch (a block and 4 spare).
const SCORE_ROW: u32 = Tiles::BLOCK + 4;

/// `vec4<f32>`s of a row of a 16×16 fragment in the backward's scratch (stored without spare).
const FRAG_ROW: u32 = 16 / 4;

/// Where `dP`'s fragment starts in the backward's scratch, after the scores' (`vec4<f32>`s).
const DP_AT: u32 = 16 * FRAG_ROW;

/// The fragment types.
const A: &str = "coop_mat16x16<f16, A>";
const B: &str = "coop_mat16x16<f16, B>";
const C: &str = "coop_mat16x16<f32, C>";

/// The WGSL body of `pass` on tensor cores (operands and parameters are declared by the kernel
/// surface).
pub(crate) fn body(pass: Pass, tiles: Tiles, mask: Mask, wide: Wide) -> String {
    let mut w = prelude(pass, tiles.head_dim, mask, wide);
    let (block, sr, own, subgroups) = (
        Tiles::BLOCK,
        tiles.staged_row(),
        tiles.own_row(),
        Tiles::SUBGROUPS,
    );
    let (a, b) = if pass.per_key() {
        ("fa_q", "fa_do")
    } else {
        ("fa_k", "fa_v")
    };
    // `fa_x`: each staged key's mask, or each staged query's log-sum-exp; `fa_y`: each staged
    // query's `D = Σ dO ⊙ O` (dK).
    let _ = writeln!(
        w,
        "var<workgroup> {a}: array<vec4<f16>, {staged}>;
var<workgroup> {b}: array<vec4<f16>, {staged}>;
var<workgroup> fa_x: array<f32, {block}>;
var<workgroup> fa_y: array<f32, {block}>;
var<workgroup> fa_p: array<vec4<f16>, {own_len}>;
var<workgroup> fa_s: array<vec4<f32>, {scratch}>;",
        staged = block * sr / 4,
        own_len = subgroups * 16 * own / 4,
        scratch = subgroups * Tiles::scratch(pass) / 4,
    );
    if pass == Pass::GradKV {
        // `dSᵀ` beside `Pᵀ` in `fa_p`.
        let _ = writeln!(
            w,
            "var<workgroup> fa_d: array<vec4<f16>, {}>;",
            subgroups * 16 * own / 4
        );
    }
    w.push('\n');
    let _ = writeln!(
        w,
        "@compute @workgroup_size({threads})
fn {entry}(
    @builtin(workgroup_id) fa_wg: vec3<u32>,
    @builtin(local_invocation_index) fa_lid: u32,
) {{
    let b = fa_wg.z;
    let sq = q_dim1();
    let sk = k_dim1();
    // This lane's subgroup, and its row (two lanes a row) and half of it.
    let sg = fa_lid / {lanes}u;
    let lane = fa_lid % {lanes}u;
    let r = lane / 2u;
    let hf = lane % 2u;
    let pbase = sg * {own_sg}u;
    let sbase = sg * {scratch}u;
    let fa_sr = {sr4}u;
    let fa_own = {own4}u;
    // The lane's row of the scratch and of the subgroup's own rows (`vec4`s; the lane's half
    // of it is chosen by each read).
    let srow = sbase + r * {score_row}u;
    let prow = pbase + r * fa_own;",
        threads = Tiles::invocations(),
        entry = pass.entry(),
        lanes = Tiles::LANES,
        own_sg = 16 * own / 4,
        scratch = Tiles::scratch(pass) / 4,
        sr4 = sr / 4,
        own4 = own / 4,
        score_row = match pass {
            Pass::Forward => SCORE_ROW / 4,
            _ => FRAG_ROW,
        },
    );
    w += &match pass {
        Pass::Forward => forward(tiles),
        Pass::GradQ => grad_q(tiles),
        Pass::GradK | Pass::GradV | Pass::GradKV => grad_kv(pass, tiles),
    };
    w += "}\n";
    w
}

/// Stages the subgroup's 16 rows of `role` (rows `first + 0..16`, clamped below `last`, of
/// head `head`) into its own rows and loads them as `A` fragments `{name}0..`: two subgroup
/// barriers, so that the rows can be staged again right after.
fn own_fragments(
    tiles: Tiles,
    role: &str,
    name: &str,
    first: &str,
    last: &str,
    head: &str,
) -> String {
    let v4 = tiles.vecs();
    let mut s = format!(
        "    for (var e = lane; e < {n}u; e = e + {lanes}u) {{
        let rr = e / {v4}u;
        fa_p[pbase + rr * fa_own + e % {v4}u] = vec4<f16>(fa_get_{role}(b, min({first} + rr, {last}), {head}, e % {v4}u));
    }}
    subgroupBarrier();
",
        n = 16 * v4,
        lanes = Tiles::LANES,
    );
    for kk in 0..tiles.slices() {
        let _ = writeln!(
            s,
            "    let {name}_at{kk} = pbase + {off}u;
    let {name}{kk} = coopLoadT<{A}>(&fa_p[{name}_at{kk}], fa_own);",
            off = 4 * kk
        );
    }
    s.push_str("    subgroupBarrier();\n");
    s
}

/// Stages rows `first..first + BLOCK` (clamped below `last`) of `roles` (each `(array,
/// getter)`) at head `head`, every lane of the workgroup taking some of their vectors. Unrolled,
/// each lane's loads issued before its first store, so that their latencies overlap: the loop
/// this replaced waited for each load before issuing the next, and at SmolLM's shapes on an
/// H100 the three kernels took 1.4–1.6× as long with it (BENCHMARKS.md).
fn stage_block(
    tiles: Tiles,
    roles: &[(&str, &str)],
    first: &str,
    last: &str,
    head: &str,
) -> String {
    let v4 = tiles.vecs();
    let threads = Tiles::invocations();
    // Heads are a multiple of 16, so a block's vectors are a whole number per lane.
    debug_assert!((Tiles::BLOCK * v4).is_multiple_of(threads));
    let per_lane = Tiles::BLOCK * v4 / threads;
    let mut s = String::new();
    for u in 0..per_lane {
        let _ = writeln!(
            s,
            "    let se{u} = fa_lid + {at}u;
    let sj{u} = min({first} + se{u} / {v4}u, {last});",
            at = u * threads
        );
        for (r, (_, role)) in roles.iter().enumerate() {
            let _ = writeln!(
                s,
                "    let sv{r}_{u} = fa_get_{role}(b, sj{u}, {head}, se{u} % {v4}u);"
            );
        }
    }
    for u in 0..per_lane {
        for (r, (array, _)) in roles.iter().enumerate() {
            let _ = writeln!(
                s,
                "    {array}[se{u} / {v4}u * fa_sr + se{u} % {v4}u] = vec4<f16>(sv{r}_{u});"
            );
        }
    }
    s
}

/// `acc = Σ_kk x{kk} · B(kk)` for the `B` fragment `(kk, col)` of a staged block `array` read
/// as its transpose (`transposed`: rows of the block are the fragment's columns, the scores'
/// `Kᵀ` and `Qᵀ`) or as stored (rows of the block are the fragment's rows).
fn product(acc: &str, x: &str, array: &str, col: u32, kks: u32, transposed: bool) -> String {
    let mut s = String::new();
    for kk in 0..kks {
        let (load, origin) = if transposed {
            // Element (k, n) at row n, column k of the block.
            ("coopLoad", format!("{} * fa_sr + {}u", 16 * col, 4 * kk))
        } else {
            // Element (k, n) at row k, column n.
            ("coopLoadT", format!("{} * fa_sr + {}u", 16 * kk, 4 * col))
        };
        let _ = writeln!(
            s,
            "        let {acc}_b{kk}_at = {origin};
        {acc} = coopMultiplyAdd({x}{kk}, {load}<{B}>(&{array}[{acc}_b{kk}_at], fa_sr), {acc});"
        );
    }
    s
}

/// Loads the subgroup's own rows of `array` (16 × BLOCK of `f16`) as the `A` fragments
/// `{name}0..{name}3`.
fn own_block_fragments(array: &str, name: &str) -> String {
    let mut s = String::new();
    for kk in 0..Tiles::BLOCK / 16 {
        let _ = writeln!(
            s,
            "        let {name}_at{kk} = pbase + {off}u;
        let {name}{kk} = coopLoadT<{A}>(&{array}[{name}_at{kk}], fa_own);",
            off = 4 * kk
        );
    }
    s
}

/// Writes the accumulators `acc0..` (16 rows × a head) through the scratch into `role`'s
/// view, times `factor`, for the lane's row `row` where `inside`: each lane two vectors of a
/// fragment's row.
fn store_fragments(
    tiles: Tiles,
    acc: &str,
    role: &str,
    row: &str,
    head: &str,
    inside: &str,
    factor: &str,
) -> String {
    let mut s = String::new();
    for c in 0..tiles.slices() {
        let _ = writeln!(
            s,
            "    subgroupBarrier();
    coopStoreT({acc}{c}, &fa_s[sbase], {FRAG_ROW}u);
    subgroupBarrier();
    if ({inside}) {{"
        );
        for c4 in 0..2 {
            let _ = writeln!(
                s,
                "        fa_put_{role}(b, {row}, {head}, {at}u + hf * 2u, fa_s[srow + hf * 2u + {c4}u]{factor});",
                at = 4 * c + c4,
            );
        }
        s.push_str("    }\n");
    }
    s
}

/// Opens the loop over blocks of keys of the query-side kernels (closed by the caller): the
/// keys staged with their values, and whether each is a token in range (`fa_x`, 1 or 0).
fn key_blocks(tiles: Tiles) -> String {
    format!(
        "    for (var j0 = 0u; j0 < kend; j0 = j0 + {block}u) {{
        workgroupBarrier();
{stage}        if (fa_lid < {block}u) {{
            let j = j0 + fa_lid;
            fa_x[fa_lid] = select(0.0, 1.0, j < sk && fa_keeps(b, min(j, sk - 1u)));
        }}
        workgroupBarrier();
",
        block = Tiles::BLOCK,
        stage = indent(
            &stage_block(
                tiles,
                &[("fa_k", "k"), ("fa_v", "v")],
                "j0",
                "sk - 1u",
                "kvh"
            ),
            4
        ),
    )
}

/// The forward: an online softmax over blocks of keys, 16 queries a subgroup.
fn forward(tiles: Tiles) -> String {
    let group = tiles.group;
    let d = tiles.head_dim;
    let half_d = d / 2;
    let mut s = format!(
        "    let h = fa_wg.y;
    let kvh = h / {group}u;
    let i0 = fa_wg.x * {rows}u;
    let i = i0 + sg * 16u + r;
    let kend = fa_key_end(min(i0 + {rows}u, sq) - 1u, sk);
",
        rows = Tiles::ROWS
    );
    s += &own_fragments(tiles, "q", "qf", "i0 + sg * 16u", "sq - 1u", "h");
    let _ = writeln!(
        s,
        "    var o: array<vec4<f32>, {}>;
    var m = FA_NEG;
    var l = 0.0;",
        half_d / 4
    );
    s += &key_blocks(tiles);
    // S = Q·Kᵀ, 16 queries × a block of keys, into the scratch.
    for j in 0..Tiles::BLOCK / 16 {
        let _ = writeln!(s, "        var sc{j}: {C};");
        s += &product(&format!("sc{j}"), "qf", "fa_k", j, tiles.slices(), true);
        let _ = writeln!(
            s,
            "        let sc{j}_at = sbase + {}u;
        coopStoreT(sc{j}, &fa_s[sc{j}_at], {}u);",
            4 * j,
            SCORE_ROW / 4
        );
    }
    // The online softmax of row r over this lane's half of the block, unrolled (every value a
    // register): the scaled, masked scores, their maximum, the probabilities as f16. The lane
    // reads its half as `vec4`s in the order `half_chunk` gives.
    let chunks = Tiles::BLOCK / 8;
    s.push_str("        subgroupBarrier();\n        var mb = m;\n");
    for g in 0..chunks {
        let _ = writeln!(
            s,
            "        let v{g} = {};
        let cc{g} = v{g} * 4u;
        let s{g} = fa_s[srow + v{g}] * params.scale;",
            half_chunk(g, chunks)
        );
        for (t, lane) in LANES.iter().enumerate() {
            let _ = writeln!(
                s,
                "        let x{c} = select(FA_NEG, s{g}.{lane}, fa_x[cc{g} + {t}u] != 0.0 && fa_causal(i, j0 + cc{g} + {t}u));
        mb = max(mb, x{c});",
                c = 4 * g + t as u32
            );
        }
    }
    s.push_str(
        "        mb = max(mb, subgroupShuffleXor(mb, 1u));
        let corr = exp(m - mb);
        var lb = 0.0;
",
    );
    for g in 0..chunks {
        let e = |t: u32| {
            let c = 4 * g + t;
            format!("select(0.0, exp(x{c} - mb), x{c} > FA_LOW)")
        };
        let _ = writeln!(
            s,
            "        let p{g} = vec4<f32>({}, {}, {}, {});
        lb = lb + p{g}.x + p{g}.y + p{g}.z + p{g}.w;
        fa_p[prow + v{g}] = vec4<f16>(p{g});",
            e(0),
            e(1),
            e(2),
            e(3)
        );
    }
    let _ = writeln!(
        s,
        "        lb = lb + subgroupShuffleXor(lb, 1u);
        l = l * corr + lb;
        m = mb;
        subgroupBarrier();
        // P·V, 16 queries × a head, into the scratch.
{}",
        own_block_fragments("fa_p", "pf")
    );
    for c in 0..tiles.slices() {
        let _ = writeln!(s, "        var pv{c}: {C};");
        s += &product(&format!("pv{c}"), "pf", "fa_v", c, Tiles::BLOCK / 16, false);
        let _ = writeln!(
            s,
            "        let pv{c}_at = sbase + {}u;
        coopStoreT(pv{c}, &fa_s[pv{c}_at], {}u);",
            4 * c,
            SCORE_ROW / 4
        );
    }
    // The lane's half row of the output, rescaled and summed with P·V's: `o[g]` holds the
    // `vec4` `half_chunk(g)` of the row, in every block.
    let q4 = half_d / 4;
    s.push_str("        subgroupBarrier();\n");
    for g in 0..q4 {
        let _ = writeln!(
            s,
            "        o[{g}] = o[{g}] * corr + fa_s[srow + {}];",
            half_chunk(g, q4)
        );
    }
    s.push_str(
        "        subgroupBarrier();
    }
    if (i < sq) {
        let inv = select(0.0, 1.0 / l, l > 0.0);
",
    );
    for g in 0..q4 {
        let _ = writeln!(
            s,
            "        fa_put_out(b, i, h, {}, o[{g}] * inv);",
            half_chunk(g, q4)
        );
    }
    s.push_str(
        "        if (hf == 0u) {
            lse_store(b, h, i, select(FA_NO_KEYS, m + log(l), l > 0.0));
        }
    }
",
    );
    s
}

/// The WGSL of the `vec4` that a lane of the forward reads `g`-th of its half of a row of
/// `2 · chunks` `vec4`s in the scratch (the row's `vec4` index): its half's `chunks`, each
/// lane of the pair starting at a different one. A row of the scratch is [`SCORE_ROW`] `f32`s,
/// 1 modulo the 8 groups of four banks that a 128-bit access's eight lanes (four rows, both
/// halves) are spread over, so that with halves of a multiple of 4 `vec4`s the second half
/// starting 4 further on puts the eight reads on eight different groups: no bank conflicts
/// (the scores' halves are 8 `vec4`s; read from their start, row `r`'s second half and row `r
/// + 4`'s first shared their banks).
fn half_chunk(g: u32, chunks: u32) -> String {
    let turn = (12 - chunks % 8) % 8;
    format!("hf * {chunks}u + ({g}u + {turn}u * hf) % {chunks}u")
}

/// The lines that turn the two 16×16 fragments in the scratch (the scores at `srow`, and
/// `dP` 256 `f32`s further where a value reads `{dp}`) into the lane's 8 values of `P` or `dS`,
/// each `(array, value)` of `outs` stored as `f16` into the subgroup's row of `array` at block
/// column `16·frag + 8·hf`. Each value, `seen` and `lse` are templates of `{p}` (the
/// probability), `{dp}` and `{cc}` (the column in the block). Unrolled, so that every value is
/// a register.
///
/// A lane reads its 8 values as two `vec4`s of its row of 4, rows `r` with `r / 2` odd the
/// second first: the rows are 4 `vec4`s apart, so rows `r` and `r + 2` of a 128-bit access's
/// eight lanes would otherwise read the same banks; this way the eight read eight different
/// groups of banks.
fn scratch_to_own(frag: u32, outs: &[(&str, &str)], seen: &str, lse: &str) -> String {
    let mut s = String::new();
    let dp = outs.iter().any(|(_, value)| value.contains("{dp}"));
    for k in 0..2u32 {
        let f = format!("{frag}_{k}");
        let _ = writeln!(
            s,
            "        let v{f} = 2u * hf + (({k}u + (r >> 1u)) & 1u);
        let s{f} = fa_s[srow + v{f}] * params.scale;"
        );
        if dp {
            let _ = writeln!(s, "        let d{f} = fa_s[srow + {DP_AT}u + v{f}];");
        }
        for t in 0..4u32 {
            let n = format!("{frag}_{}", 4 * k + t);
            let cc = format!("cc{n}");
            let _ = writeln!(
                s,
                "        let {cc} = {col}u + v{f} * 4u + {t}u;
        let p{n} = select(0.0, exp(s{f}.{lane} - {lse}), {seen});",
                col = 16 * frag,
                lane = LANES[t as usize],
                lse = lse.replace("{cc}", &cc),
                seen = seen.replace("{cc}", &cc),
            );
        }
    }
    for (array, value) in outs {
        for k in 0..2u32 {
            let ys: Vec<String> = (0..4u32)
                .map(|t| {
                    let n = format!("{frag}_{}", 4 * k + t);
                    value
                        .replace("{cc}", &format!("cc{n}"))
                        .replace("{p}", &format!("p{n}"))
                        .replace("{dp}", &format!("d{frag}_{k}.{}", LANES[t as usize]))
                })
                .collect();
            let _ = writeln!(
                s,
                "        {array}[prow + {at}u + v{frag}_{k}] = vec4<f16>(vec4<f32>({}));",
                ys.join(", "),
                at = 4 * frag,
            );
        }
    }
    s
}

/// The components of a `vec4`, in order.
const LANES: [&str; 4] = ["x", "y", "z", "w"];

/// `dQ = scale · dS·K` per query, `dS = P ⊙ (dO·Vᵀ − D)`, 16 queries a subgroup.
fn grad_q(tiles: Tiles) -> String {
    let (group, q4) = (tiles.group, tiles.vecs() / 2);
    let mut s = format!(
        "    let h = fa_wg.y;
    let kvh = h / {group}u;
    let i0 = fa_wg.x * {rows}u;
    let i = i0 + sg * 16u + r;
    let ii = min(i, sq - 1u);
    let kend = fa_key_end(min(i0 + {rows}u, sq) - 1u, sk);
    // D = Σ dO ⊙ O of the lane's row, its two halves summed across the pair.
    var dd = 0.0;
    for (var c4 = 0u; c4 < {q4}u; c4 = c4 + 1u) {{
        let c = hf * {q4}u + c4;
        dd = dd + dot(fa_get_dout(b, ii, h, c), fa_get_out(b, ii, h, c));
    }}
    dd = dd + subgroupShuffleXor(dd, 1u);
    let lse = lse_load(b, h, ii);
",
        rows = Tiles::ROWS
    );
    s += &own_fragments(tiles, "q", "qf", "i0 + sg * 16u", "sq - 1u", "h");
    s += &own_fragments(tiles, "dout", "gf", "i0 + sg * 16u", "sq - 1u", "h");
    for c in 0..tiles.slices() {
        let _ = writeln!(s, "    var dq{c}: {C};");
    }
    s += &key_blocks(tiles);
    for j in 0..Tiles::BLOCK / 16 {
        let _ = writeln!(s, "        var sc{j}: {C};\n        var dp{j}: {C};");
        s += &product(&format!("sc{j}"), "qf", "fa_k", j, tiles.slices(), true);
        s += &product(&format!("dp{j}"), "gf", "fa_v", j, tiles.slices(), true);
        let _ = writeln!(
            s,
            "        subgroupBarrier();
        let sc{j}_at = sbase;
        coopStoreT(sc{j}, &fa_s[sc{j}_at], {FRAG_ROW}u);
        let dp{j}_at = sbase + {DP_AT}u;
        coopStoreT(dp{j}, &fa_s[dp{j}_at], {FRAG_ROW}u);
        subgroupBarrier();"
        );
        s += &scratch_to_own(
            j,
            &[("fa_p", "{p} * ({dp} - dd)")],
            "fa_x[{cc}] != 0.0 && fa_causal(i, j0 + {cc})",
            "lse",
        );
    }
    s.push_str("        subgroupBarrier();\n");
    s += &own_block_fragments("fa_p", "pf");
    for c in 0..tiles.slices() {
        s += &product(&format!("dq{c}"), "pf", "fa_k", c, Tiles::BLOCK / 16, false);
    }
    s.push_str("    }\n");
    s += &store_fragments(tiles, "dq", "dq", "i", "h", "i < sq", " * params.scale");
    s.push('\n');
    s
}

/// `dK = scale · dSᵀ·Q` or `dV = Pᵀ·dO` per key, or both ([`Pass::GradKV`]: the scores,
/// `P` and `dP` made once for the two), over the queries of every head of its group, 16 keys
/// a subgroup.
fn grad_kv(pass: Pass, tiles: Tiles) -> String {
    let (group, v4) = (tiles.group, tiles.vecs());
    // What the pass writes: dK (needs dP, so V and D), dV, or both.
    let both = pass == Pass::GradKV;
    let grad_k = pass == Pass::GradK || both;
    let grad_v = pass == Pass::GradV || both;
    let mut s = format!(
        "    let kvh = fa_wg.y;
    let j0w = fa_wg.x * {rows}u;
    let j = j0w + sg * 16u + r;
    let jj = min(j, sk - 1u);
    let key = j < sk && fa_keeps(b, jj);
    let istart = fa_query_start(j0w, sq);
",
        rows = Tiles::ROWS
    );
    s += &own_fragments(tiles, "k", "kf", "j0w + sg * 16u", "sk - 1u", "kvh");
    if grad_k {
        s += &own_fragments(tiles, "v", "vf", "j0w + sg * 16u", "sk - 1u", "kvh");
    }
    // `dk{c}` and `dv{c}`: the sums of each gradient written.
    for c in 0..tiles.slices() {
        if grad_k {
            let _ = writeln!(s, "    var dk{c}: {C};");
        }
        if grad_v {
            let _ = writeln!(s, "    var dv{c}: {C};");
        }
    }
    // Each staged query's log-sum-exp and (dK) its D = Σ dO ⊙ O, unrolled so that the loads
    // are in flight together.
    let dd = if grad_k {
        let mut dd = String::from("                var dd = 0.0;\n");
        for c in 0..v4 {
            let _ = writeln!(
                dd,
                "                dd = dd + dot(fa_get_dout(b, iq, h, {c}u), fa_get_out(b, iq, h, {c}u));"
            );
        }
        dd + "                fa_y[fa_lid] = dd;\n"
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "    for (var gi = 0u; gi < {group}u; gi = gi + 1u) {{
        let h = kvh * {group}u + gi;
        for (var i0 = istart; i0 < sq; i0 = i0 + {block}u) {{
            workgroupBarrier();
{stage}            if (fa_lid < {block}u) {{
                let iq = min(i0 + fa_lid, sq - 1u);
                fa_x[fa_lid] = lse_load(b, h, iq);
{dd}            }}
            workgroupBarrier();",
        block = Tiles::BLOCK,
        stage = indent(
            &stage_block(
                tiles,
                &[("fa_q", "q"), ("fa_do", "dout")],
                "i0",
                "sq - 1u",
                "h"
            ),
            8
        ),
    );
    // Per 16 staged queries: Sᵀ (and dPᵀ) on tensor cores, through the scratch into Pᵀ (dV)
    // and dSᵀ (dK) in the subgroup's own rows.
    let mut outs = Vec::new();
    if grad_v {
        outs.push(("fa_p", "{p}"));
    }
    if grad_k {
        outs.push((
            if both { "fa_d" } else { "fa_p" },
            "{p} * ({dp} - fa_y[{cc}])",
        ));
    }
    let mut inner = String::new();
    for qf in 0..Tiles::BLOCK / 16 {
        let _ = writeln!(inner, "        var st{qf}: {C};");
        inner += &product(&format!("st{qf}"), "kf", "fa_q", qf, tiles.slices(), true);
        if grad_k {
            let _ = writeln!(inner, "        var dpt{qf}: {C};");
            inner += &product(&format!("dpt{qf}"), "vf", "fa_do", qf, tiles.slices(), true);
        }
        let _ = writeln!(
            inner,
            "        subgroupBarrier();
        let st{qf}_at = sbase;
        coopStoreT(st{qf}, &fa_s[st{qf}_at], {FRAG_ROW}u);"
        );
        if grad_k {
            let _ = writeln!(
                inner,
                "        let dpt{qf}_at = sbase + {DP_AT}u;
        coopStoreT(dpt{qf}, &fa_s[dpt{qf}_at], {FRAG_ROW}u);"
            );
        }
        inner.push_str("        subgroupBarrier();\n");
        inner += &scratch_to_own(
            qf,
            &outs,
            "key && i0 + {cc} < sq && fa_causal(i0 + {cc}, j)",
            "fa_x[{cc}]",
        );
    }
    inner.push_str("        subgroupBarrier();\n");
    // dV += Pᵀ·dO, dK += dSᵀ·Q, the staged blocks read as stored.
    if grad_v {
        inner += &own_block_fragments("fa_p", "pf");
        for c in 0..tiles.slices() {
            inner += &product(
                &format!("dv{c}"),
                "pf",
                "fa_do",
                c,
                Tiles::BLOCK / 16,
                false,
            );
        }
    }
    if grad_k {
        let (array, name) = if both { ("fa_d", "df") } else { ("fa_p", "pf") };
        inner += &own_block_fragments(array, name);
        for c in 0..tiles.slices() {
            inner += &product(&format!("dk{c}"), name, "fa_q", c, Tiles::BLOCK / 16, false);
        }
    }
    s += &indent(&inner, 4);
    s.push_str("        }\n    }\n");
    if grad_k {
        s += &store_fragments(tiles, "dk", "dk", "j", "kvh", "j < sk", " * params.scale");
    }
    if grad_v {
        s += &store_fragments(tiles, "dv", "dv", "j", "kvh", "j < sk", "");
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use fblayout_core::layout::{ElemType, LayoutSpec, View};

    use super::super::super::super::softmax::Mask;
    use super::super::super::Attention;
    use super::{Pass, Tiles, kernel_sources};

    fn heads(name: &str, heads: u32, d: u32) -> View {
        LayoutSpec::new(name)
            .elem(ElemType::F16)
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("heads", heads)
            .axis("head_dim", d)
            .build()
            .unwrap()
            .view()
    }

    /// The workgroup memory the device's limit is checked against is what each kernel
    /// declares, as naga lays it out.
    #[test]
    fn the_fit_check_counts_the_workgroup_memory_each_kernel_declares() {
        for d in [16, 32, 48, 64] {
            for (h, kv) in [(2, 2), (4, 1)] {
                let lse = LayoutSpec::new("lse")
                    .dyn_axis("batch")
                    .axis("heads", h)
                    .dyn_axis("q")
                    .build()
                    .unwrap()
                    .view();
                let views = [
                    heads("q", h, d),
                    heads("k", kv, d),
                    heads("v", kv, d),
                    heads("o", h, d),
                    lse,
                ];
                let attention = Attention::new(h, kv, d, Mask::Causal { offset: 0 });
                let sources = kernel_sources(&views, None, attention, d).unwrap().unwrap();
                let tiles = Tiles::of(d, h / kv).unwrap();
                for (pass, source) in Pass::TENSOR.into_iter().zip(sources) {
                    let built = source.build().unwrap();
                    let module = built.module().naga_module();
                    let mut layouter = naga::proc::Layouter::default();
                    layouter.update(module.to_ctx()).unwrap();
                    let declared: u64 = module
                        .global_variables
                        .iter()
                        .filter(|(_, g)| g.space == naga::AddressSpace::WorkGroup)
                        .map(|(_, g)| u64::from(layouter[g.ty].size))
                        .sum();
                    assert_eq!(
                        declared,
                        tiles.workgroup_bytes(pass),
                        "{pass:?}, heads of {d}"
                    );
                }
                // Heads of 64 fit the 48 KiB most devices with tensor cores grant.
                assert!(tiles.max_workgroup_bytes() <= 48 << 10, "heads of {d}");
            }
        }
    }
}
