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

use fblayout_core::shader::WgslModule;
use wgpu::naga;

use crate::entry_point::{Access, LinearEntry, storage_array, workgroups};
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

/// The buffer of the shape and then the extent arguments.
const DIMS: &str = "fblayout_probe_dims";
/// The buffer of results.
const OUT: &str = "fblayout_probe_out";

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
    for (given, limit, kind) in [
        (req.shape.len(), MAX_PROBE_COORDS, "coordinates"),
        (req.extent_args.len(), MAX_PROBE_EXTENTS, "extent arguments"),
    ] {
        if given > limit {
            return Err(GpuError::bad_input(
                what(),
                format!("{given} {kind} were given; the probe supports at most {limit}"),
            ));
        }
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
    let workgroups = workgroups(count)
        .ok_or_else(|| GpuError::bad_input(what(), "more points than a u32 index counts"))?;
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
    let entry = LinearEntry {
        name: PROBE_ENTRY,
        prefix: "fblayout_probe",
    };
    let mut s = String::from("\n// Index probe entry point, generated by fblayout-kernels.\n");
    if uses_dims(coords, arity) {
        s += &storage_array(0, Access::Read, DIMS);
    }
    s += &storage_array(1, Access::ReadWrite, OUT);
    s.push('\n');
    s += &entry.open(&format!("arrayLength(&{OUT})"));
    let dims: Vec<String> = (0..arity).map(|d| format!("{DIMS}[{d}u]")).collect();
    s += &entry.decode(&dims[..coords]);
    let args = entry.arguments(coords, &dims[coords..]);
    let i = entry.index();
    s += &format!(
        "    if ({in_bounds_fn}({args})) {{\n\
         \x20       {OUT}[{i}] = {offset_fn}({args});\n\
         \x20   }} else {{\n\
         \x20       {OUT}[{i}] = {OUT_OF_BOUNDS:#x}u;\n\
         \x20   }}\n\
         }}\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry_point::WORKGROUP_SIZE;

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
        let check = |name: &str, shape: &[u32], ret: Return| {
            check_function(
                module.naga_module(),
                name,
                &request(&module, name, shape),
                ret,
            )
        };
        assert!(check("rm_offset", &[3, 4], Return::U32).is_ok());
        let two: &[u32] = &[3, 4];
        for (name, shape, ret, expected) in [
            (
                "nope_offset",
                two,
                Return::U32,
                ["`nope_offset`", "not defined"],
            ),
            (
                "rm_offset",
                &[3],
                Return::U32,
                ["`rm_offset`", "takes 3 parameters"],
            ),
            (
                "bad_ret",
                two,
                Return::U32,
                ["`bad_ret`", "does not return u32"],
            ),
            (
                "bad_arg",
                two,
                Return::U32,
                ["parameter 1 of function `bad_arg`", "not a u32"],
            ),
            (
                "rm_offset",
                two,
                Return::Bool,
                ["`rm_offset`", "does not return bool"],
            ),
        ] {
            let err = check(name, shape, ret).unwrap_err();
            assert!(expected.iter().all(|e| err.contains(e)), "{name}: {err}");
        }
    }
}
