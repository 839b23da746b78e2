//! The WGSL of the GEMM kernels, generated for one tiling and the operands' access modes.
//!
//! One workgroup computes a `tile_m × tile_n` block of C for one product of the batch (the
//! third grid axis names the product, and the part of the reduction under split-k). It walks
//! `k` in steps: every invocation loads a few elements of the next A and B tiles into
//! registers, stores them into workgroup memory, and then multiplies from there. Two buffers of
//! workgroup memory let the loads of step `t + 1` overlap the multiplications of step `t` with
//! one barrier per step.
//!
//! The staged tiles are `[k][outer / 4]` arrays of `vec4` (outer is `m` for A and `n` for B)
//! whatever the operand's layout, so one inner loop serves every layout. How a tile is loaded
//! depends on what the kernel surface granted ([`Staging`]): four neighbours along the outer
//! axis (one `vec4` into one `vec4` of workgroup memory), four along `k` (one `vec4` into four
//! rows), or single elements. Each row of a staged tile holds one spare `vec4`, so rows start
//! on different banks and the scattered stores of the `k`-wide mode don't conflict.
//!
//! Partial tiles are masked where they are loaded, not in the inner loop: coordinates past the
//! end of `m` or `n` are clamped to the last row or column (those outputs are never stored),
//! and elements past the end of `k` are replaced by zeros with `select`, so padding or NaN in
//! the tensor never reaches a sum. `beta = 0` skips the read of C altogether.
//!
//! A biased product ([`Finish::Biased`]) overwrites C with `sum + bias[n]`: the bias of a
//! block's four columns is read once per block (its index clamped to the bias's end, those
//! columns are never stored) and added to each row; it has no `alpha` or `beta`. Under
//! split-k the partial kernels know nothing of it: the reduction adds it once, to the sum of
//! the parts.
//!
//! An added product ([`Finish::Added`]) overwrites C with `alpha · sum + D` (or `alpha · sum ·
//! f'(D)`, [`Merge`]), `D` a matrix of C's extents read through its own view as each block is
//! written (the addition after a product, or an activation's backward, done by it).
//!
//! The inner loop is unrolled by the generator: per `k`, an invocation reads `thread_m / 4`
//! `vec4`s of A and `thread_n / 4` of B and does `thread_m × thread_n` multiply-adds into
//! registers. Nothing here computes an offset: tensors are addressed by coordinates through
//! `<role>_load`/`<role>_store`.

use std::fmt::Write as _;

use super::Merge;
use super::tiling::TileConfig;

/// The entry point of the GEMM kernels.
pub(crate) const ENTRY: &str = "matmul";
/// The entry point of the split-k reduction.
pub(crate) const REDUCE_ENTRY: &str = "matmul_reduce";

/// How an operand's tile is loaded into workgroup memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Staging {
    /// `load4` along the outer axis (`m` of A, `n` of B).
    Outer,
    /// `load4` along `k`.
    K,
    /// One element at a time.
    Scalar,
}

/// How C is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Store {
    /// `store4` along `n`.
    N,
    /// `store4` along `m`.
    M,
    /// One element at a time.
    Scalar,
}

/// What is made of a sum on its way into C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Finish {
    /// `alpha · sum + beta · C` (scalars `alpha` and `beta`; `beta = 0` does not read C).
    Scaled,
    /// `sum + bias[n]` (operand `bias`, `[n]`), overwriting C.
    Biased,
    /// `alpha · sum ⊕ D` (operand `d`, a matrix of C's extents read through its own view;
    /// scalar `alpha`; `⊕` as the [`Merge`] says), overwriting C: the operation after the
    /// product, done as it is written.
    Added(Merge),
}

/// Where the sums go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Epilogue {
    /// Into C, finished as [`Finish`] says.
    Direct(Store, Finish),
    /// Into the partial sums of split `z % splits` (the reduction kernel finishes).
    Partial,
}

/// What one GEMM kernel is generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct GemmSpec {
    pub config: TileConfig,
    /// Leading batch axes (0 to 3).
    pub batch_axes: usize,
    pub a: Staging,
    pub b: Staging,
    pub epilogue: Epilogue,
    /// Whether the bias (of a biased epilogue) is read four at a time where it can be.
    pub bias_wide: bool,
}

pub(super) const LANES: [&str; 4] = ["x", "y", "z", "w"];

/// `mm_b0, mm_b1, ` for the batch coordinates (empty without batch axes).
pub(super) fn batch_coords(batch_axes: usize) -> String {
    (0..batch_axes).map(|d| format!("mm_b{d}, ")).collect()
}

/// `mm_b0: u32, ...` for helper signatures.
pub(super) fn batch_params(batch_axes: usize) -> String {
    (0..batch_axes).map(|d| format!("mm_b{d}: u32, ")).collect()
}

/// Statements decoding `var mm_z` into the batch coordinates of the batch axes of operand
/// `role`, last fastest.
pub(super) fn decode_batch(s: &mut String, role: &str, batch_axes: usize) {
    for d in (1..batch_axes).rev() {
        let _ = writeln!(
            s,
            "    let mm_b{d} = mm_z % {role}_dim{d}();\n    mm_z = mm_z / {role}_dim{d}();"
        );
    }
    if batch_axes > 0 {
        let _ = writeln!(s, "    let mm_b0 = mm_z;");
    }
}

/// The statement storing `value` into C at `coords` (`c_store4` when `wide`), finished as
/// `finish` says: with `Scaled`, `value` has been multiplied by `alpha` and `beta · C` is added
/// where `beta` is not zero; with `Biased`, `value` already holds its bias; with `Added`,
/// `value` has been multiplied by `alpha` and `D` at `coords` is added (`mm_d4`, four along the
/// direction C is stored in, when `wide`).
pub(super) fn store_c(finish: Finish, wide: bool, coords: &str, value: &str, ind: &str) -> String {
    let (store, load) = if wide {
        ("c_store4", "c_load4")
    } else {
        ("c_store", "c_load")
    };
    match finish {
        Finish::Scaled => format!(
            "{ind}if (params.beta != 0.0) {{
{ind}    {store}({coords}, {value} + params.beta * {load}({coords}));
{ind}}} else {{
{ind}    {store}({coords}, {value});
{ind}}}\n"
        ),
        Finish::Biased => format!("{ind}{store}({coords}, {value});\n"),
        Finish::Added(merge) => {
            let d = if wide { "mm_d4" } else { "d_load" };
            let merged = merge.wgsl(value, &format!("{d}({coords})"), wide);
            format!("{ind}{store}({coords}, {merged});\n")
        }
    }
}

/// The helper `mm_d4(m, n)`: four elements of D from `(m, n)` along the direction C is
/// stored in (`m` for [`Store::M`], else `n`): one `d_load4` where D is read four at a time
/// along that direction (`wide`), else one by one. It is called only where all four lie
/// inside C.
fn addend_helper(store: Store, batch_axes: usize, wide: bool) -> String {
    let (bp, bc) = (batch_params(batch_axes), batch_coords(batch_axes));
    let at = |j: u32| match store {
        Store::M => format!("d_load({bc}mm_m + {j}u, mm_n)"),
        Store::N | Store::Scalar => format!("d_load({bc}mm_m, mm_n + {j}u)"),
    };
    let value = if wide {
        format!("d_load4({bc}mm_m, mm_n)")
    } else {
        format!("vec4<f32>({}, {}, {}, {})", at(0), at(1), at(2), at(3))
    };
    format!("fn mm_d4({bp}mm_m: u32, mm_n: u32) -> vec4<f32> {{\n    return {value};\n}}\n")
}

/// The helper `mm_bias4(n)`: `bias[n..n + 4]` for `n` a multiple of four, elements past the
/// bias's end clamped to its last (their columns are never stored).
fn bias_helper(bias_wide: bool) -> String {
    let mut s = String::from("fn mm_bias4(mm_n: u32) -> vec4<f32> {\n");
    if bias_wide {
        s.push_str("    if (mm_n + 3u < bias_dim0()) {\n        return bias_load4(mm_n);\n    }\n");
    }
    s.push_str(
        "    let mm_last = max(bias_dim0(), 1u) - 1u;
    return vec4<f32>(
        bias_load(min(mm_n, mm_last)),
        bias_load(min(mm_n + 1u, mm_last)),
        bias_load(min(mm_n + 2u, mm_last)),
        bias_load(min(mm_n + 3u, mm_last)),
    );
}
",
    );
    s
}

/// The helpers that write four rows × four columns of C at `(mm_m, mm_n)` (rows `mm_r0..3`,
/// each a `vec4` over the columns), masked to C's extents, finished as `finish` says
/// (`bias_wide`: the bias, or D, is read four at a time where it can be).
pub(super) fn write_block(
    store: Store,
    batch_axes: usize,
    finish: Finish,
    bias_wide: bool,
) -> String {
    let bp = batch_params(batch_axes);
    let bc = batch_coords(batch_axes);
    let m_dim = format!("c_dim{batch_axes}()");
    let n_dim = format!("c_dim{}()", batch_axes + 1);
    let mut s = String::new();
    match finish {
        Finish::Biased => s += &bias_helper(bias_wide),
        Finish::Added(_) => s += &addend_helper(store, batch_axes, bias_wide),
        Finish::Scaled => {}
    }
    let scaled = |v: &str| match finish {
        Finish::Scaled | Finish::Added(_) => format!("params.alpha * {v}"),
        Finish::Biased => v.to_owned(),
    };
    // One row of four columns, element by element or as one vec4.
    let _ = writeln!(
        s,
        "fn mm_write_row({bp}mm_m: u32, mm_n: u32, mm_v: vec4<f32>) {{
    if (mm_m >= {m_dim}) {{
        return;
    }}
    let mm_out = {};",
        scaled("mm_v")
    );
    if store == Store::N {
        let _ = write!(
            s,
            "    if (mm_n + 3u < {n_dim}) {{\n{}        return;\n    }}\n",
            store_c(
                finish,
                true,
                &format!("{bc}mm_m, mm_n"),
                "mm_out",
                "        "
            )
        );
    }
    let _ = writeln!(
        s,
        "    for (var mm_j = 0u; mm_j < 4u; mm_j = mm_j + 1u) {{
        if (mm_n + mm_j < {n_dim}) {{
{}        }}
    }}
}}",
        store_c(
            finish,
            false,
            &format!("{bc}mm_m, mm_n + mm_j"),
            "mm_out[mm_j]",
            "            "
        )
    );
    let _ = writeln!(
        s,
        "fn mm_write_block({bp}mm_m: u32, mm_n: u32, mm_r0: vec4<f32>, mm_r1: vec4<f32>, mm_r2: vec4<f32>, mm_r3: vec4<f32>) {{"
    );
    if finish == Finish::Biased {
        s.push_str("    let mm_bias = mm_bias4(mm_n);\n");
    }
    if store == Store::M {
        // Four rows are four neighbours along m: one store4 per column when all are inside.
        let column = match finish {
            Finish::Scaled | Finish::Added(_) => {
                "params.alpha * vec4<f32>(mm_r0[mm_j], mm_r1[mm_j], mm_r2[mm_j], mm_r3[mm_j])"
            }
            Finish::Biased => {
                "vec4<f32>(mm_r0[mm_j], mm_r1[mm_j], mm_r2[mm_j], mm_r3[mm_j]) + vec4<f32>(mm_bias[mm_j])"
            }
        };
        let _ = writeln!(
            s,
            "    if (mm_m + 3u < {m_dim}) {{
        for (var mm_j = 0u; mm_j < 4u; mm_j = mm_j + 1u) {{
            if (mm_n + mm_j < {n_dim}) {{
                let mm_out = {column};
{}            }}
        }}
        return;
    }}",
            store_c(
                finish,
                true,
                &format!("{bc}mm_m, mm_n + mm_j"),
                "mm_out",
                "                "
            )
        );
    }
    let plus_bias = match finish {
        Finish::Scaled | Finish::Added(_) => "",
        Finish::Biased => " + mm_bias",
    };
    for r in 0..4 {
        let _ = writeln!(
            s,
            "    mm_write_row({bc}mm_m + {r}u, mm_n, mm_r{r}{plus_bias});"
        );
    }
    s.push_str("}\n");
    s
}

/// The coordinates of element `(outer, k)` of operand `role` (A is `[m, k]`, B is `[k, n]`).
fn at(role: &str, batch: &str, outer: &str, k: &str) -> String {
    if role == "a" {
        format!("{batch}{outer}, {k}")
    } else {
        format!("{batch}{k}, {outer}")
    }
}

/// The per-invocation registers a staged load fills, and the statements that fill them from
/// the tile at `mm_k0` and store them into buffer `mm_buf`.
struct Stage {
    declare: String,
    load: String,
    store: String,
}

/// The staging of operand `role` (`a` or `b`) over a tile of `outer` × `k_step`.
fn stage(role: &str, mode: Staging, outer: u32, config: &TileConfig, batch_axes: usize) -> Stage {
    let threads = config.invocations();
    let k_step = config.k_step;
    let bc = batch_coords(batch_axes);
    let tile = format!("mm_{role}_tile");
    // Origin and clamp limits along the outer axis.
    let (origin, last) = if role == "a" {
        ("mm_m0", "mm_m_last")
    } else {
        ("mm_n0", "mm_n_last")
    };
    let last4 = format!("{last}4");
    let (items, width) = match mode {
        Staging::Scalar => (outer * k_step, 1),
        _ => (outer * k_step / 4, 4),
    };
    let per_thread = items.div_ceil(threads);
    let mut declare = String::new();
    let mut load = String::new();
    let mut store = String::new();
    let ty = if width == 4 { "vec4<f32>" } else { "f32" };
    for i in 0..per_thread {
        let reg = format!("mm_{role}_reg{i}");
        let _ = writeln!(declare, "    var {reg}: {ty};");
        // Items past the tile (when threads don't divide it) are guarded by the invocation
        // index, which is uniform per subgroup.
        let guard = (i + 1) * threads > items;
        let (open, close) = if guard {
            (
                format!("        if (mm_lid + {}u < {items}u) {{\n", i * threads),
                "        }\n",
            )
        } else {
            (String::new(), "")
        };
        let e = format!("(mm_lid + {}u)", i * threads);
        let ind = if guard { "            " } else { "        " };
        load += &open;
        store += &open;
        match mode {
            Staging::Outer => {
                // e → (k row, vec4 along outer), outer fastest.
                let per_row = outer / 4;
                let _ = writeln!(
                    load,
                    "{ind}{{\n{ind}    let mm_kk = {e} / {per_row}u;\n{ind}    let mm_o = min({origin} + ({e} % {per_row}u) * 4u, {last4});\n{ind}    let mm_k = mm_k0 + mm_kk;\n{ind}    {reg} = select(vec4<f32>(0.0), {role}_load4({}), mm_k < mm_k_end);\n{ind}}}",
                    at(role, &bc, "mm_o", "min(mm_k, mm_k_last)")
                );
                let _ = writeln!(
                    store,
                    "{ind}{tile}[mm_buf][{e} / {per_row}u][{e} % {per_row}u] = {reg};"
                );
            }
            Staging::K => {
                // e → (outer, group of four along k), k fastest.
                let per_row = k_step / 4;
                let _ = writeln!(
                    load,
                    "{ind}{{\n{ind}    let mm_o = min({origin} + {e} / {per_row}u, {last});\n{ind}    let mm_k = mm_k0 + ({e} % {per_row}u) * 4u;\n{ind}    let mm_v = {role}_load4({});\n{ind}    let mm_in = vec4<u32>(mm_k) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(mm_k_end);\n{ind}    {reg} = select(vec4<f32>(0.0), mm_v, mm_in);\n{ind}}}",
                    at(role, &bc, "mm_o", "min(mm_k, mm_k_last4)")
                );
                let _ = writeln!(
                    store,
                    "{ind}{{\n{ind}    let mm_o = {e} / {per_row}u;\n{ind}    let mm_kk = ({e} % {per_row}u) * 4u;"
                );
                for (j, lane) in LANES.iter().enumerate() {
                    let _ = writeln!(
                        store,
                        "{ind}    {tile}[mm_buf][mm_kk + {j}u][mm_o / 4u][mm_o % 4u] = {reg}.{lane};"
                    );
                }
                let _ = writeln!(store, "{ind}}}");
            }
            Staging::Scalar => {
                // e → (k row, outer), outer fastest.
                let _ = writeln!(
                    load,
                    "{ind}{{\n{ind}    let mm_o = min({origin} + {e} % {outer}u, {last});\n{ind}    let mm_k = mm_k0 + {e} / {outer}u;\n{ind}    {reg} = select(0.0, {role}_load({}), mm_k < mm_k_end);\n{ind}}}",
                    at(role, &bc, "mm_o", "min(mm_k, mm_k_last)")
                );
                let _ = writeln!(
                    store,
                    "{ind}{{\n{ind}    let mm_o = {e} % {outer}u;\n{ind}    {tile}[mm_buf][{e} / {outer}u][mm_o / 4u][mm_o % 4u] = {reg};\n{ind}}}"
                );
            }
        }
        load += close;
        store += close;
    }
    Stage {
        declare,
        load,
        store,
    }
}

/// The GEMM kernel's body: workgroup memory, the entry point and its helpers.
pub(crate) fn gemm(spec: &GemmSpec) -> String {
    let GemmSpec {
        config,
        batch_axes: nb,
        a,
        b,
        epilogue,
        bias_wide,
    } = *spec;
    let c = config;
    let (tm, tn, ks) = (c.tile_m, c.tile_n, c.k_step);
    let (threads_m, threads_n) = (c.threads_m(), c.threads_n());
    let (groups_m, groups_n) = (c.thread_m / 4, c.thread_n / 4);
    let bc = batch_coords(nb);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// Tiling: {c}; A staged {a:?}, B staged {b:?}; {epilogue:?}.
var<workgroup> mm_a_tile: array<array<array<vec4<f32>, {}>, {ks}>, 2>;
var<workgroup> mm_b_tile: array<array<array<vec4<f32>, {}>, {ks}>, 2>;
",
        TileConfig::staged_row(tm),
        TileConfig::staged_row(tn),
    );
    if let Epilogue::Direct(store, finish) = epilogue {
        s += &write_block(store, nb, finish, bias_wide);
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "@compute @workgroup_size({})
fn {ENTRY}(
    @builtin(workgroup_id) mm_wg: vec3<u32>,
    @builtin(local_invocation_index) mm_lid: u32,
) {{",
        c.invocations()
    );
    // Extents and batch shape from A and B (the host checked that they agree with C's).
    let _ = writeln!(
        s,
        "    let mm_m_len = a_dim{nb}();
    let mm_k_len = a_dim{}();
    let mm_n_len = b_dim{}();",
        nb + 1,
        nb + 1
    );
    s.push_str("    var mm_z = mm_wg.z;\n");
    match epilogue {
        Epilogue::Direct(..) => {
            s.push_str("    let mm_k_begin = 0u;\n    let mm_k_end = mm_k_len;\n");
        }
        Epilogue::Partial => {
            s.push_str(
                "    let mm_split = mm_z % params.splits;
    mm_z = mm_z / params.splits;
    let mm_product = mm_z;
    let mm_k_begin = min(mm_split * params.split_len, mm_k_len);
    let mm_k_end = min(mm_k_begin + params.split_len, mm_k_len);
",
            );
        }
    }
    decode_batch(&mut s, "a", nb);
    let _ = writeln!(
        s,
        "    let mm_m0 = mm_wg.y * {tm}u;
    let mm_n0 = mm_wg.x * {tn}u;
    // Loads are clamped to the last element (or the last aligned four) so that every load is
    // inside the tensor; elements past the end of k are masked to zero.
    let mm_m_last = max(mm_m_len, 1u) - 1u;
    let mm_n_last = max(mm_n_len, 1u) - 1u;
    let mm_k_last = max(mm_k_len, 1u) - 1u;
    let mm_m_last4 = mm_m_last - mm_m_last % 4u;
    let mm_n_last4 = mm_n_last - mm_n_last % 4u;
    let mm_k_last4 = mm_k_last - mm_k_last % 4u;
    let mm_steps = (mm_k_end - mm_k_begin + {}u) / {ks}u;
    let mm_tx = mm_lid % {threads_n}u;
    let mm_ty = mm_lid / {threads_n}u;",
        ks - 1
    );
    for r in 0..c.thread_m {
        for g in 0..groups_n {
            let _ = writeln!(s, "    var mm_acc{r}_{g} = vec4<f32>(0.0);");
        }
    }
    let sa = stage("a", a, tm, &c, nb);
    let sb = stage("b", b, tn, &c, nb);
    s += &sa.declare;
    s += &sb.declare;
    let _ = writeln!(
        s,
        "    if (mm_steps > 0u) {{\n        let mm_k0 = mm_k_begin;\n{}{}    }}",
        sa.load, sb.load
    );
    let _ = writeln!(
        s,
        "    for (var mm_t = 0u; mm_t < mm_steps; mm_t = mm_t + 1u) {{
        let mm_buf = mm_t & 1u;
{}{}        workgroupBarrier();
        // The next step's loads are in flight while this step multiplies.
        let mm_k0 = mm_k_begin + (mm_t + 1u) * {ks}u;
{}{}",
        sa.store, sb.store, sa.load, sb.load
    );
    for kk in 0..ks {
        s.push_str("        {\n");
        for g in 0..groups_m {
            let _ = writeln!(
                s,
                "            let mm_a{g} = mm_a_tile[mm_buf][{kk}u][mm_ty + {}u];",
                g * threads_m
            );
        }
        for g in 0..groups_n {
            let _ = writeln!(
                s,
                "            let mm_b{g} = mm_b_tile[mm_buf][{kk}u][mm_tx + {}u];",
                g * threads_n
            );
        }
        for r in 0..c.thread_m {
            let (g, lane) = (r / 4, LANES[(r % 4) as usize]);
            for gn in 0..groups_n {
                let _ = writeln!(
                    s,
                    "            mm_acc{r}_{gn} = fma(vec4<f32>(mm_a{g}.{lane}), mm_b{gn}, mm_acc{r}_{gn});"
                );
            }
        }
        s.push_str("        }\n");
    }
    s.push_str("    }\n");
    // Epilogue: each group of four rows × four columns.
    for gm in 0..groups_m {
        for gn in 0..groups_n {
            let m = format!("mm_m0 + (mm_ty + {}u) * 4u", gm * threads_m);
            let n = format!("mm_n0 + (mm_tx + {}u) * 4u", gn * threads_n);
            let rows: Vec<String> = (0..4)
                .map(|i| format!("mm_acc{}_{gn}", gm * 4 + i))
                .collect();
            match epilogue {
                Epilogue::Direct(..) => {
                    let _ = writeln!(s, "    mm_write_block({bc}{m}, {n}, {});", rows.join(", "));
                }
                Epilogue::Partial => {
                    let _ = writeln!(
                        s,
                        "    {{\n        let mm_m = {m};\n        let mm_n = {n};\n        if (mm_n < mm_n_len) {{"
                    );
                    for (i, row) in rows.iter().enumerate() {
                        let _ = writeln!(
                            s,
                            "            if (mm_m + {i}u < mm_m_len) {{\n                partial_store4(mm_product, mm_split, mm_m + {i}u, mm_n, {row});\n            }}"
                        );
                    }
                    s.push_str("        }\n    }\n");
                }
            }
        }
    }
    s.push_str("}\n");
    s
}

/// The split-k reduction: `C = alpha · Σ_split partial + beta · C` (or `C = Σ_split partial +
/// bias`, the bias added once, here), four columns per invocation.
pub(crate) fn reduce(store: Store, batch_axes: usize, finish: Finish, bias_wide: bool) -> String {
    let entry = crate::entry_point::LinearEntry {
        name: REDUCE_ENTRY,
        prefix: "mm_r",
    };
    let nb = batch_axes;
    let bc = batch_coords(nb);
    let units = [
        "partial_dim0()".to_owned(),
        format!("c_dim{nb}()"),
        format!("((c_dim{}() + 3u) / 4u)", nb + 1),
    ];
    let mut s = write_block(store, nb, finish, bias_wide);
    s.push('\n');
    s += &entry.open(&units.join(" * "));
    s += &entry.decode(&units);
    let (z, m, n4) = (entry.coord(0), entry.coord(1), entry.coord(2));
    let _ = writeln!(
        s,
        "    var mm_sum = vec4<f32>(0.0);
    for (var mm_s = 0u; mm_s < params.splits; mm_s = mm_s + 1u) {{
        mm_sum = mm_sum + partial_load4({z}, mm_s, {m}, {n4} * 4u);
    }}
    var mm_z = {z};"
    );
    decode_batch(&mut s, "c", nb);
    let sum = match finish {
        Finish::Scaled | Finish::Added(_) => "mm_sum".to_owned(),
        Finish::Biased => format!("mm_sum + mm_bias4({n4} * 4u)"),
    };
    let _ = writeln!(s, "    mm_write_row({bc}{m}, {n4} * 4u, {sum});\n}}");
    s
}
