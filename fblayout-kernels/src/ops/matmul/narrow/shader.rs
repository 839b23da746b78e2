//! The WGSL of the narrow products' kernels (see the [parent module](super)).
//!
//! Like the GEMM's, the kernels address tensors by coordinates through the operands'
//! `<role>_load`/`<role>_store`, never by offsets, so every layout of A, B and C is read
//! through its own view. Loads past the end of an extent are clamped to its last element (or
//! last aligned four) and elements past the end of `k` are replaced by zeros with `select`,
//! so padding or NaN never reaches a sum; outputs past C's extents are never stored.

use std::fmt::Write as _;

use super::super::shader::{
    Finish, LANES, Staging, Store, batch_coords, decode_batch, store_c, write_block,
};

/// The entry point of the narrow kernels.
pub(crate) const ENTRY: &str = "matmul_narrow";

/// Invocations per workgroup of every narrow kernel.
pub(crate) const INVOCATIONS: u32 = 256;

/// Rows and columns of C per workgroup of the short-`k` kernel (each invocation computes a
/// block of 4 × 4).
pub(crate) const SHORT_TILE: u32 = 64;

/// Elements of `k` a thin kernel stages at a time.
const CHUNK: u32 = 128;

/// Which side of C is narrow in a thin product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Side {
    /// C has few columns: A (`[m, k]`) is the wide operand, streamed once.
    N,
    /// C has few rows: B (`[k, n]`) is the wide operand.
    M,
}

/// How the invocations of a thin kernel share its workgroup's rows and reduction: each
/// invocation reads `rows_per` neighbouring rows (of the wide side) × `k_per` neighbouring
/// elements of `k` per load (four along whichever axis the wide operand is contiguous in),
/// `lanes_k` invocations split the reduction of `lanes_rows` such groups, and a staged chunk
/// of `k` is `unroll` loads deep for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub rows_per: u32,
    pub k_per: u32,
    pub lanes_rows: u32,
    pub lanes_k: u32,
    pub unroll: u32,
}

impl Geometry {
    /// The geometry for a wide operand loaded as `wide` says: neighbouring invocations read
    /// neighbouring memory (along `k` for [`Staging::K`] and single elements, along the rows
    /// for [`Staging::Outer`]), and a staged chunk of `k` is [`CHUNK`] deep, so that each
    /// invocation has that many elements' loads in flight at once.
    pub(crate) fn of(wide: Staging) -> Self {
        let (rows_per, k_per, lanes_rows) = match wide {
            Staging::K => (1, 4, 8),
            Staging::Outer => (4, 1, 16),
            Staging::Scalar => (1, 1, 8),
        };
        let lanes_k = INVOCATIONS / lanes_rows;
        Self {
            rows_per,
            k_per,
            lanes_rows,
            lanes_k,
            unroll: (CHUNK / (lanes_k * k_per)).max(1),
        }
    }

    /// Rows of the wide side per workgroup.
    pub(crate) fn rows(&self) -> u32 {
        self.rows_per * self.lanes_rows
    }

    /// Elements of `k` per staged chunk.
    pub(crate) fn k_chunk(&self) -> u32 {
        self.lanes_k * self.k_per * self.unroll
    }
}

/// Where a thin kernel's sums go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ThinOut {
    /// Into C: `alpha · sum + beta · C` (`beta = 0` does not read C).
    Direct,
    /// Into the partial sums of split `z % splits` (the GEMM's reduction finishes).
    Partial,
}

/// What one thin kernel is generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ThinSpec {
    pub side: Side,
    /// The narrow side's static extent (1 to 16).
    pub width: u32,
    /// How the wide operand is loaded.
    pub wide: Staging,
    pub batch_axes: usize,
    pub out: ThinOut,
}

/// The thin kernel: one workgroup per block of [`Geometry::rows`] rows of the wide side (and
/// product, and part of the reduction), every invocation summing its share of `k` for all the
/// narrow side's outputs in registers, then the workgroup adding the shares.
pub(crate) fn thin(spec: &ThinSpec) -> String {
    let ThinSpec {
        side,
        width,
        wide,
        batch_axes: nb,
        out,
    } = *spec;
    let g = Geometry::of(wide);
    let (tw4, kc) = (width.div_ceil(4), g.k_chunk());
    let tw = tw4 * 4;
    let bc = batch_coords(nb);
    let (w, t) = match side {
        Side::N => ("a", "b"),
        Side::M => ("b", "a"),
    };
    let w_at = |big: &str, k: &str| match side {
        Side::N => format!("{bc}{big}, {k}"),
        Side::M => format!("{bc}{k}, {big}"),
    };
    let t_at = |k: &str, thin: &str| match side {
        Side::N => format!("{bc}{k}, {thin}"),
        Side::M => format!("{bc}{thin}, {k}"),
    };
    let c_at = |big: &str, thin: &str| match side {
        Side::N => format!("{bc}{big}, {thin}"),
        Side::M => format!("{bc}{thin}, {big}"),
    };
    let (big_dim, thin_dim) = match side {
        Side::N => (format!("a_dim{nb}()"), format!("b_dim{}()", nb + 1)),
        Side::M => (format!("b_dim{}()", nb + 1), format!("a_dim{nb}()")),
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// Narrow side {side:?} of {width}; wide operand `{w}` loaded {wide:?}; {out:?}.
var<workgroup> nw_t: array<vec4<f32>, {}>;
var<workgroup> nw_red: array<vec4<f32>, {INVOCATIONS}>;

@compute @workgroup_size({INVOCATIONS})
fn {ENTRY}(
    @builtin(workgroup_id) nw_wg: vec3<u32>,
    @builtin(num_workgroups) nw_groups: vec3<u32>,
    @builtin(local_invocation_index) nw_lid: u32,
) {{
    // The blocks of rows are folded into the grid's x and y (a dispatch's x is limited).
    let nw_block = nw_wg.x + nw_wg.y * nw_groups.x;
    let nw_big_len = {big_dim};
    let nw_thin_len = {thin_dim};
    let nw_k_len = a_dim{}();
    var mm_z = nw_wg.z;",
        kc * tw4,
        nb + 1
    );
    match out {
        ThinOut::Direct => s.push_str("    let nw_k_begin = 0u;\n    let nw_k_end = nw_k_len;\n"),
        ThinOut::Partial => s.push_str(
            "    let mm_split = mm_z % params.splits;
    mm_z = mm_z / params.splits;
    let mm_product = mm_z;
    let nw_k_begin = min(mm_split * params.split_len, nw_k_len);
    let nw_k_end = min(nw_k_begin + params.split_len, nw_k_len);
",
        ),
    }
    decode_batch(&mut s, "a", nb);
    let (lanes_rows, lanes_k) = (g.lanes_rows, g.lanes_k);
    let (tr, tk) = if wide == Staging::Outer {
        (
            format!("nw_lid % {lanes_rows}u"),
            format!("nw_lid / {lanes_rows}u"),
        )
    } else {
        (
            format!("nw_lid / {lanes_k}u"),
            format!("nw_lid % {lanes_k}u"),
        )
    };
    let _ = writeln!(
        s,
        "    let nw_tr = {tr};
    let nw_tk = {tk};
    let nw_row = nw_block * {}u + nw_tr * {}u;
    let nw_big_last = max(nw_big_len, 1u) - 1u;
    let nw_big_last4 = nw_big_last - nw_big_last % 4u;
    let nw_thin_last = max(nw_thin_len, 1u) - 1u;
    let nw_k_last = max(nw_k_len, 1u) - 1u;
    let nw_k_last4 = nw_k_last - nw_k_last % 4u;",
        g.rows(),
        g.rows_per
    );
    for r in 0..g.rows_per {
        for q in 0..tw4 {
            let _ = writeln!(s, "    var nw_acc{r}_{q} = vec4<f32>(0.0);");
        }
    }
    let _ = writeln!(
        s,
        "    for (var nw_k0 = nw_k_begin; nw_k0 < nw_k_end; nw_k0 = nw_k0 + {kc}u) {{"
    );
    // The wide operand's values of this chunk, loaded first so that their latency overlaps the
    // staging's: `value(r, j)` of row `nw_row + r` at `k0 + g · k_per + j`, from `nw_w{u}`.
    for u in 0..g.unroll {
        let _ = writeln!(
            s,
            "        let nw_g{u} = {}u + nw_tk;\n        let nw_at{u} = nw_k0 + nw_g{u} * {}u;",
            u * lanes_k,
            g.k_per
        );
        let _ = match wide {
            Staging::K => writeln!(
                s,
                "        let nw_in{u} = vec4<u32>(nw_at{u}) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(nw_k_end);
        let nw_w{u} = select(vec4<f32>(0.0), {w}_load4({}), nw_in{u});",
                w_at("min(nw_row, nw_big_last)", &format!("min(nw_at{u}, nw_k_last4)"))
            ),
            Staging::Outer => writeln!(
                s,
                "        let nw_w{u} = select(vec4<f32>(0.0), {w}_load4({}), nw_at{u} < nw_k_end);",
                w_at("min(nw_row, nw_big_last4)", &format!("min(nw_at{u}, nw_k_last)"))
            ),
            Staging::Scalar => writeln!(
                s,
                "        let nw_w{u} = select(0.0, {w}_load({}), nw_at{u} < nw_k_end);",
                w_at("min(nw_row, nw_big_last)", &format!("min(nw_at{u}, nw_k_last)"))
            ),
        };
    }
    let value = |u: u32, r: u32, j: u32| match wide {
        Staging::K => format!("nw_w{u}.{}", LANES[j as usize]),
        Staging::Outer => format!("nw_w{u}.{}", LANES[r as usize]),
        Staging::Scalar => format!("nw_w{u}"),
    };
    // Stage the narrow operand's chunk, zeros past either end, as `[n / 4][j][g]` of vec4s
    // (`k = k0 + g · k_per + j`): the invocations of neighbouring `g` read neighbouring vec4s,
    // without bank conflicts (`[k][n / 4]` put 128 bytes between them).
    let groups = kc / g.k_per;
    let items = kc * tw;
    for i in 0..items.div_ceil(INVOCATIONS) {
        let e = format!("(nw_lid + {}u)", i * INVOCATIONS);
        let guard = (i + 1) * INVOCATIONS > items;
        let ind = if guard { "            " } else { "        " };
        if guard {
            let _ = writeln!(s, "        if ({e} < {items}u) {{");
        }
        let _ = writeln!(
            s,
            "{ind}{{
{ind}    let nw_g = {e} % {groups}u;
{ind}    let nw_j = ({e} / {groups}u) % {k_per}u;
{ind}    let nw_n = {e} / {kc}u;
{ind}    let nw_k = nw_k0 + nw_g * {k_per}u + nw_j;
{ind}    let nw_v = {t}_load({});
{ind}    nw_t[(nw_n / 4u) * {kc}u + nw_j * {groups}u + nw_g][nw_n % 4u] = select(0.0, nw_v, nw_k < nw_k_end && nw_n < nw_thin_len);
{ind}}}",
            t_at("min(nw_k, nw_k_last)", "min(nw_n, nw_thin_last)"),
            k_per = g.k_per
        );
        if guard {
            s.push_str("        }\n");
        }
    }
    s.push_str("        workgroupBarrier();\n");
    for u in 0..g.unroll {
        s.push_str("        {\n");
        for j in 0..g.k_per {
            for q in 0..tw4 {
                let _ = writeln!(
                    s,
                    "            let nw_t{j}_{q} = nw_t[{}u + nw_g{u}];",
                    q * kc + j * groups
                );
                for r in 0..g.rows_per {
                    let _ = writeln!(
                        s,
                        "            nw_acc{r}_{q} = fma(vec4<f32>({}), nw_t{j}_{q}, nw_acc{r}_{q});",
                        value(u, r, j)
                    );
                }
            }
        }
        s.push_str("        }\n");
    }
    s.push_str("        workgroupBarrier();\n    }\n");
    // Add the shares of `k`: the invocation of share 0 of each group of rows keeps the sum.
    let share = if wide == Staging::Outer {
        format!("nw_j * {lanes_rows}u + nw_tr")
    } else {
        format!("nw_tr * {lanes_k}u + nw_j")
    };
    for r in 0..g.rows_per {
        for q in 0..tw4 {
            let _ = writeln!(
                s,
                "    nw_red[nw_lid] = nw_acc{r}_{q};
    workgroupBarrier();
    if (nw_tk == 0u) {{
        var nw_sum = vec4<f32>(0.0);
        for (var nw_j = 0u; nw_j < {lanes_k}u; nw_j = nw_j + 1u) {{
            nw_sum = nw_sum + nw_red[{share}];
        }}
        nw_acc{r}_{q} = nw_sum;
    }}
    workgroupBarrier();"
            );
        }
    }
    s.push_str("    if (nw_tk != 0u) {\n        return;\n    }\n");
    for r in 0..g.rows_per {
        let _ = writeln!(
            s,
            "    if (nw_row + {r}u < nw_big_len) {{\n        let nw_big = nw_row + {r}u;"
        );
        for q in 0..tw4 {
            let acc = format!("nw_acc{r}_{q}");
            match (out, side) {
                (ThinOut::Partial, Side::N) => {
                    let _ = writeln!(
                        s,
                        "        partial_store4(mm_product, mm_split, nw_big, {}u, {acc});",
                        q * 4
                    );
                }
                (ThinOut::Partial, Side::M) => {
                    for l in 0..4.min(width - q * 4) {
                        let _ = writeln!(
                            s,
                            "        partial_store(mm_product, mm_split, {}u, nw_big, {acc}.{});",
                            q * 4 + l,
                            LANES[l as usize]
                        );
                    }
                }
                (ThinOut::Direct, _) => {
                    for l in 0..4.min(width - q * 4) {
                        let coords = c_at("nw_big", &format!("{}u", q * 4 + l));
                        let value = format!("params.alpha * {acc}.{}", LANES[l as usize]);
                        s += &store_c(Finish::Scaled, false, &coords, &value, "        ");
                    }
                }
            }
        }
        s.push_str("    }\n");
    }
    s.push_str("}\n");
    s
}

/// What the short-`k` kernel is generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ShortSpec {
    /// The static extent of `k` (1 to 16).
    pub k: u32,
    pub batch_axes: usize,
    /// How A is read: four rows at once ([`Staging::Outer`]), four of `k`, or single elements.
    pub a: Staging,
    /// Whether B is read four columns at once.
    pub b_wide: bool,
    /// How C is written.
    pub store: Store,
    /// How D (operand `d`) joins `alpha · sum` where C is written so, rather than as
    /// `alpha · sum + beta · C`.
    pub added: Option<super::super::Merge>,
    /// Whether D is read four at a time along the axis C is stored along.
    pub d_wide: bool,
}

/// The short-`k` kernel: every invocation computes a block of 4 × 4 outputs, each a sum of
/// `k` products unrolled in registers, and writes it through the GEMM's epilogue (masked to
/// C's extents, `alpha · sum + beta · C`, or `alpha · sum ⊕ D` where `added`).
pub(crate) fn short(spec: &ShortSpec) -> String {
    let ShortSpec {
        k,
        batch_axes: nb,
        a,
        b_wide,
        store,
        added,
        d_wide,
    } = *spec;
    let bc = batch_coords(nb);
    let lanes = SHORT_TILE / 4;
    let finish = added.map_or(Finish::Scaled, Finish::Added);
    let mut s = write_block(store, nb, finish, d_wide);
    // Neighbouring invocations write neighbouring memory: along m when C is stored so.
    let (tx, ty) = if store == Store::M {
        (format!("nw_lid / {lanes}u"), format!("nw_lid % {lanes}u"))
    } else {
        (format!("nw_lid % {lanes}u"), format!("nw_lid / {lanes}u"))
    };
    let _ = writeln!(
        s,
        "
// Short k of {k}; A read {a:?}, B read four columns at once: {b_wide}; C stored {store:?}.
@compute @workgroup_size({INVOCATIONS})
fn {ENTRY}(
    @builtin(workgroup_id) nw_wg: vec3<u32>,
    @builtin(local_invocation_index) nw_lid: u32,
) {{
    let nw_m_len = a_dim{nb}();
    let nw_n_len = b_dim{}();
    var mm_z = nw_wg.z;",
        nb + 1
    );
    decode_batch(&mut s, "a", nb);
    let _ = writeln!(
        s,
        "    let nw_m = nw_wg.y * {SHORT_TILE}u + ({ty}) * 4u;
    let nw_n = nw_wg.x * {SHORT_TILE}u + ({tx}) * 4u;
    let nw_m_last = max(nw_m_len, 1u) - 1u;
    let nw_n_last = max(nw_n_len, 1u) - 1u;
    let nw_m_last4 = nw_m_last - nw_m_last % 4u;
    let nw_n_last4 = nw_n_last - nw_n_last % 4u;"
    );
    for r in 0..4 {
        let _ = writeln!(s, "    var nw_r{r} = vec4<f32>(0.0);");
    }
    // A's values: `value(r, j)` of row `nw_m + r` at `j`.
    let bc_a = bc.clone();
    let value: Box<dyn Fn(u32, u32) -> String> = match a {
        Staging::Outer => {
            for j in 0..k {
                let _ = writeln!(
                    s,
                    "    let nw_a{j} = a_load4({bc}min(nw_m, nw_m_last4), {j}u);"
                );
            }
            Box::new(|r, j| format!("nw_a{j}.{}", LANES[r as usize]))
        }
        Staging::K => {
            for r in 0..4 {
                for q in 0..k / 4 {
                    let _ = writeln!(
                        s,
                        "    let nw_a{r}_{q} = a_load4({bc}min(nw_m + {r}u, nw_m_last), {}u);",
                        q * 4
                    );
                }
            }
            Box::new(move |r, j| {
                if j < k / 4 * 4 {
                    format!("nw_a{r}_{}.{}", j / 4, LANES[(j % 4) as usize])
                } else {
                    format!("a_load({bc_a}min(nw_m + {r}u, nw_m_last), {j}u)")
                }
            })
        }
        Staging::Scalar => {
            Box::new(move |r, j| format!("a_load({bc_a}min(nw_m + {r}u, nw_m_last), {j}u)"))
        }
    };
    for j in 0..k {
        if b_wide {
            let _ = writeln!(
                s,
                "    let nw_b{j} = b_load4({bc}{j}u, min(nw_n, nw_n_last4));"
            );
        } else {
            let cols: Vec<String> = (0..4)
                .map(|c| format!("b_load({bc}{j}u, min(nw_n + {c}u, nw_n_last))"))
                .collect();
            let _ = writeln!(s, "    let nw_b{j} = vec4<f32>({});", cols.join(", "));
        }
        for r in 0..4 {
            let _ = writeln!(
                s,
                "    nw_r{r} = fma(vec4<f32>({}), nw_b{j}, nw_r{r});",
                value(r, j)
            );
        }
    }
    let _ = writeln!(
        s,
        "    mm_write_block({bc}nw_m, nw_n, nw_r0, nw_r1, nw_r2, nw_r3);\n}}"
    );
    s
}
