//! The index probe: evaluates a layout's WGSL index functions on the GPU.
//!
//! Layouts compile to a pair of WGSL functions over the same parameters, the coordinates and then
//! the dynamic extents, all `u32`:
//!
//! ```wgsl
//! fn <name>_offset(c0: u32, ..., e0: u32, ...) -> u32
//! fn <name>_in_bounds(c0: u32, ..., e0: u32, ...) -> bool
//! ```
//!
//! [`probe_offsets`] calls them for every coordinate of a shape (row-major, last coordinate
//! fastest) and returns `Some(offset)` where `_in_bounds` holds and `None` where it does not, so
//! tests can compare the GPU path with the CPU one, including coordinates enumerated past the
//! tensor's extents (padded tiles). It appends a compute entry point ([`PROBE_ENTRY`]) to the
//! layout's module with [`WgslModule::extend`], so the combined WGSL is validated by naga before
//! wgpu sees it.

use fblayout_core::wgsl::WgslModule;
use wgpu::naga;

use crate::runtime::{Binding, Gpu, GpuBuffer, GpuError};

/// The name of the compute entry point that the probe appends to the module.
pub const PROBE_ENTRY: &str = "fblayout_probe_main";
/// The most coordinate parameters a probed function may have.
pub const MAX_PROBE_COORDS: usize = 8;
/// The most dynamic extent parameters a probed function may have.
pub const MAX_PROBE_EXTENTS: usize = 8;
/// What the probe kernel writes for coordinates that are out of bounds. A real offset never has
/// this value: buffers hold fewer than `u32::MAX` elements.
pub const OUT_OF_BOUNDS: u32 = u32::MAX;
/// The most coordinates one probe enumerates (the linear index must stay far from `u32::MAX`).
pub const MAX_PROBE_POINTS: u64 = 1 << 31;

const WORKGROUP_SIZE: u32 = 256;

/// What to probe: a module, its two index functions and the shape to enumerate.
#[derive(Debug, Clone, Copy)]
pub struct ProbeRequest<'a> {
    /// The validated module that defines both functions.
    pub module: &'a WgslModule,
    /// `fn <name>_offset(coords..., extents...) -> u32`.
    pub offset_fn: &'a str,
    /// `fn <name>_in_bounds(coords..., extents...) -> bool`.
    pub in_bounds_fn: &'a str,
    /// The extents to enumerate, one per coordinate parameter. They may exceed the tensor's
    /// extents (e.g. whole padded tiles); `in_bounds_fn` decides which coordinates are valid.
    pub shape: &'a [u32],
    /// The values passed after the coordinates (the layout's dynamic extents).
    pub extent_args: &'a [u32],
}

/// Evaluates `req.offset_fn` and `req.in_bounds_fn` on the GPU for every coordinate of
/// `req.shape` in row-major order (last coordinate fastest).
///
/// Element `i` of the result is `Some(offset)` when `in_bounds` holds for the `i`-th coordinate
/// and `None` when it does not (`offset` is not called then). A shape with a zero extent gives an
/// empty result; an empty shape gives one element (the functions called with only extents).
///
/// Fails with [`GpuError::BadInput`] when a function is missing from the module, does not take
/// `shape.len() + extent_args.len()` `u32` parameters, or does not return `u32`/`bool`, or when
/// there are more than [`MAX_PROBE_COORDS`] coordinates, [`MAX_PROBE_EXTENTS`] extents or
/// [`MAX_PROBE_POINTS`] points.
pub fn probe_offsets(gpu: &Gpu, req: &ProbeRequest<'_>) -> Result<Vec<Option<u32>>, GpuError> {
    let what = || format!("probe_offsets on `{}`", req.module.name());
    if req.shape.len() > MAX_PROBE_COORDS {
        return Err(GpuError::bad_input(
            what(),
            format!(
                "the shape has {} coordinates; the probe supports at most {MAX_PROBE_COORDS}",
                req.shape.len()
            ),
        ));
    }
    if req.extent_args.len() > MAX_PROBE_EXTENTS {
        return Err(GpuError::bad_input(
            what(),
            format!(
                "{} extent arguments were given; the probe supports at most {MAX_PROBE_EXTENTS}",
                req.extent_args.len()
            ),
        ));
    }
    let arity = req.shape.len() + req.extent_args.len();
    let module = req.module.naga_module();
    check_function(module, req.offset_fn, req, Return::U32)
        .map_err(|r| GpuError::bad_input(what(), r))?;
    check_function(module, req.in_bounds_fn, req, Return::Bool)
        .map_err(|r| GpuError::bad_input(what(), r))?;

    let count = req
        .shape
        .iter()
        .try_fold(1u64, |acc, &n| acc.checked_mul(u64::from(n)))
        .filter(|&n| n <= MAX_PROBE_POINTS)
        .ok_or_else(|| {
            GpuError::bad_input(
                what(),
                format!(
                    "the shape {:?} has more than {MAX_PROBE_POINTS} points",
                    req.shape
                ),
            )
        })?;
    if count == 0 {
        return Ok(Vec::new());
    }

    let source = entry_point_source(req.offset_fn, req.in_bounds_fn, req.shape.len(), arity);
    let probe = req.module.extend(
        format!("{}+probe", req.module.name()),
        &source,
        gpu.wgsl_features(),
    )?;
    let out = GpuBuffer::zeroed::<u32>(gpu, count as usize)?;
    let dims: Vec<u32> = req.shape.iter().chain(req.extent_args).copied().collect();
    let dims_buffer;
    let mut bindings = vec![Binding::new(1, &out)];
    if uses_dims(req.shape.len(), arity) {
        dims_buffer = GpuBuffer::from_slice(gpu, &dims)?;
        bindings.push(Binding::new(0, &dims_buffer));
    }
    let workgroups = count.div_ceil(u64::from(WORKGROUP_SIZE)) as u32;
    gpu.dispatch_linear(&probe, PROBE_ENTRY, &bindings, workgroups)?;
    let raw = out.read_back::<u32>()?;
    Ok(raw
        .into_iter()
        .map(|v| (v != OUT_OF_BOUNDS).then_some(v))
        .collect())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Return {
    U32,
    Bool,
}

/// Checks that `name` is a function of `module` taking `arity` `u32`s and returning `ret`.
fn check_function(
    module: &naga::Module,
    name: &str,
    req: &ProbeRequest<'_>,
    ret: Return,
) -> Result<(), String> {
    let arity = req.shape.len() + req.extent_args.len();
    let Some((_, function)) = module
        .functions
        .iter()
        .find(|(_, f)| f.name.as_deref() == Some(name))
    else {
        return Err(format!("function `{name}` is not defined in the module"));
    };
    if function.arguments.len() != arity {
        return Err(format!(
            "function `{name}` takes {} parameters, but the probe passes {arity} \
             ({} coordinates from the shape + {} extent arguments)",
            function.arguments.len(),
            req.shape.len(),
            req.extent_args.len()
        ));
    }
    let u32_ty = naga::TypeInner::Scalar(naga::Scalar::U32);
    let bool_ty = naga::TypeInner::Scalar(naga::Scalar::BOOL);
    for (i, arg) in function.arguments.iter().enumerate() {
        if module.types[arg.ty].inner != u32_ty {
            return Err(format!(
                "parameter {i} of function `{name}` is not a u32 (it is {:?})",
                module.types[arg.ty].inner
            ));
        }
    }
    let (want, want_name) = match ret {
        Return::U32 => (u32_ty, "u32"),
        Return::Bool => (bool_ty, "bool"),
    };
    match &function.result {
        Some(result) if module.types[result.ty].inner == want => Ok(()),
        _ => Err(format!("function `{name}` does not return {want_name}")),
    }
}

/// Whether the entry point reads `dims`: to decode more than one coordinate, or to pass extent
/// arguments. (A binding the shader never reads is dropped from the pipeline's automatic
/// layout, so it must not be bound either.)
fn uses_dims(coords: usize, arity: usize) -> bool {
    coords > 1 || arity > coords
}

/// The WGSL of the probe's compute entry point for `coords` coordinates and `arity` parameters
/// in all. `dims` holds the shape and then the extent arguments; it is only declared when
/// [`uses_dims`].
fn entry_point_source(offset_fn: &str, in_bounds_fn: &str, coords: usize, arity: usize) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    s.push_str("\n// Index probe entry point, generated by fblayout-kernels.\n");
    if uses_dims(coords, arity) {
        s.push_str("@group(0) @binding(0) var<storage, read> fblayout_probe_dims: array<u32>;\n");
    }
    s.push_str(
        "@group(0) @binding(1) var<storage, read_write> fblayout_probe_out: array<u32>;\n\n",
    );
    let _ = write!(
        s,
        "@compute @workgroup_size({WORKGROUP_SIZE})\n\
         fn {PROBE_ENTRY}(\n\
         \x20   @builtin(workgroup_id) fblayout_probe_wg: vec3<u32>,\n\
         \x20   @builtin(num_workgroups) fblayout_probe_nwg: vec3<u32>,\n\
         \x20   @builtin(local_invocation_index) fblayout_probe_lid: u32,\n\
         ) {{\n\
         \x20   let fblayout_probe_i = (fblayout_probe_wg.x + fblayout_probe_wg.y * fblayout_probe_nwg.x) \
         * {WORKGROUP_SIZE}u + fblayout_probe_lid;\n\
         \x20   if (fblayout_probe_i >= arrayLength(&fblayout_probe_out)) {{\n\
         \x20       return;\n\
         \x20   }}\n"
    );
    // Row-major decode: peel the last coordinate off first.
    if coords > 0 {
        s.push_str("    var fblayout_probe_rest = fblayout_probe_i;\n");
        for c in (1..coords).rev() {
            let _ = writeln!(
                s,
                "    let fblayout_probe_c{c} = fblayout_probe_rest % fblayout_probe_dims[{c}u];\n\
                 \x20   fblayout_probe_rest = fblayout_probe_rest / fblayout_probe_dims[{c}u];"
            );
        }
        s.push_str("    let fblayout_probe_c0 = fblayout_probe_rest;\n");
    }
    let args: Vec<String> = (0..coords)
        .map(|c| format!("fblayout_probe_c{c}"))
        .chain((coords..arity).map(|d| format!("fblayout_probe_dims[{d}u]")))
        .collect();
    let args = args.join(", ");
    let _ = write!(
        s,
        "    if ({in_bounds_fn}({args})) {{\n\
         \x20       fblayout_probe_out[fblayout_probe_i] = {offset_fn}({args});\n\
         \x20   }} else {{\n\
         \x20       fblayout_probe_out[fblayout_probe_i] = {OUT_OF_BOUNDS:#x}u;\n\
         \x20   }}\n\
         }}\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROW_MAJOR: &str = "
fn rm_offset(i: u32, j: u32, n: u32) -> u32 { return i * n + j; }
fn rm_in_bounds(i: u32, j: u32, n: u32) -> bool { return j < n; }
fn bad_ret(i: u32, j: u32, n: u32) -> i32 { return 0; }
fn bad_arg(i: u32, j: i32, n: u32) -> u32 { return 0u; }
";

    fn request<'a>(
        module: &'a WgslModule,
        offset_fn: &'a str,
        shape: &'a [u32],
    ) -> ProbeRequest<'a> {
        ProbeRequest {
            module,
            offset_fn,
            in_bounds_fn: "rm_in_bounds",
            shape,
            extent_args: &[4],
        }
    }

    #[test]
    fn generated_entry_point_validates_for_every_arity() {
        // Functions with c coordinates and e extents, for the limits and the corners.
        for (c, e) in [(0, 0), (1, 0), (0, 1), (3, 1), (8, 8)] {
            let params: Vec<String> = (0..c + e).map(|k| format!("p{k}: u32")).collect();
            let params = params.join(", ");
            let src = format!(
                "fn f_offset({params}) -> u32 {{ return 7u; }}\n\
                 fn f_in_bounds({params}) -> bool {{ return true; }}\n"
            );
            let module = WgslModule::validate("f", src).unwrap();
            let entry = entry_point_source("f_offset", "f_in_bounds", c, c + e);
            let probe = module.extend("f+probe", &entry, Default::default());
            assert!(
                probe.is_ok(),
                "{c} coords, {e} extents: {}",
                probe.unwrap_err()
            );
            let probe = probe.unwrap();
            let ep = &probe.naga_module().entry_points;
            assert_eq!(ep.len(), 1);
            assert_eq!(ep[0].name, PROBE_ENTRY);
            assert_eq!(ep[0].workgroup_size, [WORKGROUP_SIZE, 1, 1]);
        }
    }

    #[test]
    fn function_checks_name_the_function() {
        let module = WgslModule::validate("rm", ROW_MAJOR).unwrap();
        let m = module.naga_module();
        assert!(
            check_function(
                m,
                "rm_offset",
                &request(&module, "rm_offset", &[3, 4]),
                Return::U32
            )
            .is_ok()
        );
        let err = check_function(
            m,
            "nope_offset",
            &request(&module, "nope_offset", &[3, 4]),
            Return::U32,
        )
        .unwrap_err();
        assert!(
            err.contains("`nope_offset`") && err.contains("not defined"),
            "{err}"
        );
        let err = check_function(
            m,
            "rm_offset",
            &request(&module, "rm_offset", &[3]),
            Return::U32,
        )
        .unwrap_err();
        assert!(
            err.contains("`rm_offset`") && err.contains("takes 3 parameters"),
            "{err}"
        );
        let err = check_function(
            m,
            "bad_ret",
            &request(&module, "bad_ret", &[3, 4]),
            Return::U32,
        )
        .unwrap_err();
        assert!(
            err.contains("`bad_ret`") && err.contains("return u32"),
            "{err}"
        );
        let err = check_function(
            m,
            "bad_arg",
            &request(&module, "bad_arg", &[3, 4]),
            Return::U32,
        )
        .unwrap_err();
        assert!(err.contains("parameter 1 of function `bad_arg`"), "{err}");
        let err = check_function(
            m,
            "rm_offset",
            &request(&module, "rm_offset", &[3, 4]),
            Return::Bool,
        )
        .unwrap_err();
        assert!(err.contains("does not return bool"), "{err}");
    }
}
