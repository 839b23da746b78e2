//! GPU tests of the wgpu runtime and the index probe.
//!
//! These run on whatever adapter `FBLAYOUT_ADAPTER`/`FBLAYOUT_BACKEND` pick; CI runs them on
//! Mesa's lavapipe. They fail (never skip) when no adapter is found.

use std::sync::OnceLock;

use fblayout_core::shader::WgslModule;
use fblayout_kernels::probe::{MAX_PROBE_COORDS, PROBE_ENTRY, ProbeRequest, probe_offsets};
use fblayout_kernels::runtime::{
    AdapterChoice, Binding, BufferKind, Gpu, GpuBuffer, GpuError, Scratch, Workspace, linear_grid,
};

fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| {
        // Fail, never skip: CI runs these tests on lavapipe.
        let gpu = Gpu::new().unwrap_or_else(|err| {
            panic!(
                "could not open a GPU for the fblayout-kernels tests; install Mesa's Vulkan drivers \
                 (`apt-get install mesa-vulkan-drivers`, which includes lavapipe) or set \
                 FBLAYOUT_ADAPTER/FBLAYOUT_BACKEND.\n{err}"
            )
        });
        eprintln!("fblayout-kernels tests run on {}", gpu.info());
        gpu
    })
}

fn module(name: &str, source: &str) -> WgslModule {
    WgslModule::validate(name, source).unwrap_or_else(|err| panic!("{err}"))
}

/// `out[i] = in[i] * p.mul + p.add`, one invocation per element, over a linear grid.
const AFFINE: &str = "
struct Params { mul: u32, add: u32, _pad0: u32, _pad1: u32 }
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wg.x + wg.y * nwg.x) * 64u + lid;
    if (i >= arrayLength(&dst)) { return; }
    dst[i] = src[i] * p.mul + p.add;
}
";

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    mul: u32,
    add: u32,
    pad: [u32; 2],
}

fn run_affine(gpu: &Gpu, input: &[u32], mul: u32, add: u32) -> (Vec<u32>, [u32; 3]) {
    let m = module("affine", AFFINE);
    let src = GpuBuffer::from_slice(gpu, input).unwrap();
    let dst = GpuBuffer::zeroed::<u32>(gpu, input.len()).unwrap();
    let params = GpuBuffer::uniform(
        gpu,
        &Params {
            mul,
            add,
            pad: [0; 2],
        },
    )
    .unwrap();
    assert_eq!(params.kind(), BufferKind::Uniform);
    let bindings = [
        Binding::new(0, &src),
        Binding::new(1, &dst),
        Binding::new(2, &params),
    ];
    let workgroups = input.len().div_ceil(64) as u32;
    let grid = gpu
        .dispatch_linear(&m, "main", &bindings, workgroups)
        .unwrap();
    (dst.read_back::<u32>().unwrap(), grid)
}

#[test]
fn u32_buffer_round_trips_through_a_kernel() {
    let gpu = gpu();
    let input: Vec<u32> = (0..1000u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let (out, grid) = run_affine(gpu, &input, 3, 17);
    assert_eq!(grid, [16, 1, 1]);
    let expected: Vec<u32> = input
        .iter()
        .map(|v| v.wrapping_mul(3).wrapping_add(17))
        .collect();
    assert_eq!(out, expected);

    // Plain upload/download, without a kernel, keeps every bit.
    let buf = GpuBuffer::from_slice(gpu, &input).unwrap();
    assert_eq!(buf.len_bytes(), 4000);
    assert_eq!(buf.read_back::<u32>().unwrap(), input);
    let replaced: Vec<u32> = input.iter().rev().copied().collect();
    buf.write(&replaced).unwrap();
    assert_eq!(buf.read_back::<u32>().unwrap(), replaced);
}

#[test]
fn dispatch_beyond_65535_workgroups_folds_into_y() {
    let gpu = gpu();
    let workgroups = 65_535 + 1_000;
    let n = workgroups as usize * 64;
    let input: Vec<u32> = (0..n as u32).collect();
    let (out, grid) = run_affine(gpu, &input, 5, 1);
    assert_eq!(grid, [65_535, 2, 1]);
    assert_eq!(out.len(), n);
    // Every element, including those only reached through workgroup_id.y, was written once.
    for (i, v) in out.iter().enumerate() {
        assert_eq!(
            *v,
            (i as u32).wrapping_mul(5).wrapping_add(1),
            "element {i}"
        );
    }
    assert_eq!(
        linear_grid(workgroups, gpu.max_workgroups_per_dimension()),
        Some(grid)
    );

    // The plain dispatch refuses a grid over the per-dimension limit instead of failing in wgpu.
    let m = module("affine", AFFINE);
    let dst = GpuBuffer::zeroed::<u32>(gpu, 64).unwrap();
    let err = gpu
        .dispatch(&m, "main", &[Binding::new(1, &dst)], [workgroups, 1, 1])
        .unwrap_err();
    assert!(matches!(err, GpuError::BadInput { .. }), "{err:?}");
    assert!(err.to_string().contains("dispatch_linear"), "{err}");
}

#[test]
fn pipelines_are_compiled_once_per_source_and_entry() {
    // A Gpu of its own, so that other tests do not change its cache.
    let gpu = Gpu::new()
        .unwrap_or_else(|err| panic!("no GPU adapter: install mesa-vulkan-drivers\n{err}"));
    let src = "
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(64)
fn inc(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&data)) { data[id.x] = data[id.x] + 1u; }
}
@compute @workgroup_size(64)
fn dec(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&data)) { data[id.x] = data[id.x] - 1u; }
}
";
    let m = module("incdec", src);
    let data = GpuBuffer::from_slice(&gpu, &[10u32; 100]).unwrap();
    let b = [Binding::new(0, &data)];
    assert_eq!(gpu.cached_pipelines(), 0);
    gpu.dispatch(&m, "inc", &b, [2, 1, 1]).unwrap();
    gpu.dispatch(&m, "inc", &b, [2, 1, 1]).unwrap();
    gpu.dispatch(&m, "inc", &b, [2, 1, 1]).unwrap();
    assert_eq!(gpu.cached_pipelines(), 1);
    gpu.dispatch(&m, "dec", &b, [2, 1, 1]).unwrap();
    assert_eq!(gpu.cached_pipelines(), 2);
    // A module with the same source is the same kernel.
    let again = module("incdec again", src);
    gpu.dispatch(&again, "inc", &b, [2, 1, 1]).unwrap();
    assert_eq!(gpu.cached_pipelines(), 2);
    // Comments (the tensors' names in generated kernels) don't make another kernel.
    let commented = module(
        "incdec commented",
        &format!(
            "// Kernel built for tensor `l3.ffn`\n{}",
            src.replace("1u; }", "1u; } // one")
        ),
    );
    gpu.dispatch(&commented, "inc", &b, [2, 1, 1]).unwrap();
    assert_eq!(gpu.cached_pipelines(), 2);
    // Other code does, and so does a block comment, inside which `//` is no comment.
    let other = module("inc by two", &src.replace("+ 1u", "+ 2u"));
    gpu.dispatch(&other, "inc", &b, [2, 1, 1]).unwrap();
    assert_eq!(gpu.cached_pipelines(), 3);
    let block = module("incdec block", &format!("/* a // b */\n{src}"));
    gpu.dispatch(&block, "dec", &b, [2, 1, 1]).unwrap();
    assert_eq!(gpu.cached_pipelines(), 4);
    // Dispatches run in submission order: 10 + 3 - 1 + 1 + 1 + 2 - 1.
    assert_eq!(data.read_back::<u32>().unwrap(), vec![15u32; 100]);
}

#[test]
fn odd_sized_and_empty_buffers_round_trip() {
    let gpu = gpu();
    let bytes = GpuBuffer::from_slice(gpu, &[1u8, 2, 3, 4, 5]).unwrap();
    assert_eq!(bytes.len_bytes(), 5);
    assert_eq!(bytes.read_back::<u8>().unwrap(), vec![1, 2, 3, 4, 5]);
    let err = bytes.read_back::<u32>().unwrap_err();
    assert!(matches!(err, GpuError::BadInput { .. }), "{err:?}");
    let err = bytes.write(&[1u8, 2]).unwrap_err();
    assert!(matches!(err, GpuError::BadInput { .. }), "{err:?}");

    let empty = GpuBuffer::from_slice::<u32>(gpu, &[]).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.read_back::<u32>().unwrap(), Vec::<u32>::new());

    let zeros = GpuBuffer::zeroed::<u64>(gpu, 33).unwrap();
    assert_eq!(zeros.read_back::<u64>().unwrap(), vec![0u64; 33]);
}

#[test]
fn several_buffers_come_back_in_one_read() {
    let gpu = gpu();
    let odd = GpuBuffer::from_slice(gpu, &[1u8, 2, 3, 4, 5]).unwrap();
    let empty = GpuBuffer::from_slice::<u8>(gpu, &[]).unwrap();
    let words = GpuBuffer::from_slice(gpu, &[7u32, 8, 9]).unwrap();
    let last = GpuBuffer::from_slice(gpu, &[255u8; 3]).unwrap();
    let all = GpuBuffer::read_back_all::<u8>(&[&odd, &empty, &words, &last]).unwrap();
    let word_bytes: Vec<u8> = [7u32, 8, 9].iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(
        all,
        vec![vec![1, 2, 3, 4, 5], vec![], word_bytes, vec![255; 3]]
    );
    assert_eq!(
        GpuBuffer::read_back_all::<u32>(&[&words, &words]).unwrap(),
        vec![vec![7, 8, 9]; 2]
    );
    assert!(GpuBuffer::read_back_all::<u32>(&[]).unwrap().is_empty());
    let err = GpuBuffer::read_back_all::<u32>(&[&words, &odd]).unwrap_err();
    assert!(matches!(err, GpuError::BadInput { .. }), "{err:?}");
}

#[test]
fn buffers_beyond_the_device_limits_are_refused() {
    let gpu = gpu();
    let limit = gpu
        .limits()
        .max_storage_buffer_binding_size
        .min(gpu.limits().max_buffer_size);
    let elements = (limit / 4 + 1) as usize;
    let err = GpuBuffer::zeroed::<u32>(gpu, elements).unwrap_err();
    match err {
        GpuError::BufferTooLarge {
            bytes, limit: l, ..
        } => {
            assert_eq!(l, limit);
            assert!(bytes > limit);
        }
        other => panic!("expected BufferTooLarge, got {other:?}"),
    }
    let err = GpuBuffer::zeroed::<u64>(gpu, usize::MAX).unwrap_err();
    assert!(matches!(err, GpuError::BufferTooLarge { .. }), "{err:?}");
}

#[test]
fn missing_entry_point_is_an_error() {
    let gpu = gpu();
    let m = module("affine", AFFINE);
    let dst = GpuBuffer::zeroed::<u32>(gpu, 64).unwrap();
    let err = gpu
        .dispatch(&m, "mian", &[Binding::new(1, &dst)], [1, 1, 1])
        .unwrap_err();
    assert!(matches!(err, GpuError::BadInput { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("`mian`") && msg.contains("main"), "{msg}");
}

#[test]
fn wgpu_validation_errors_come_back_as_err() {
    let gpu = gpu();
    let m = module("affine", AFFINE);
    let src = GpuBuffer::from_slice(gpu, &[1u32; 64]).unwrap();
    let dst = GpuBuffer::zeroed::<u32>(gpu, 64).unwrap();
    let params = GpuBuffer::uniform(
        gpu,
        &Params {
            mul: 1,
            add: 1,
            pad: [0; 2],
        },
    )
    .unwrap();

    // A storage buffer where the shader wants a uniform one.
    let wrong_kind = [
        Binding::new(0, &src),
        Binding::new(1, &dst),
        Binding::new(2, &src),
    ];
    let err = gpu
        .dispatch(&m, "main", &wrong_kind, [1, 1, 1])
        .unwrap_err();
    assert!(matches!(err, GpuError::Validation { .. }), "{err:?}");

    // A binding the shader lacks, and one missing.
    let missing = [Binding::new(0, &src), Binding::new(1, &dst)];
    let err = gpu.dispatch(&m, "main", &missing, [1, 1, 1]).unwrap_err();
    assert!(matches!(err, GpuError::Validation { .. }), "{err:?}");
    let extra = [
        Binding::new(0, &src),
        Binding::new(1, &dst),
        Binding::new(2, &params),
        Binding::new(3, &dst),
    ];
    let err = gpu.dispatch(&m, "main", &extra, [1, 1, 1]).unwrap_err();
    assert!(matches!(err, GpuError::Validation { .. }), "{err:?}");

    // The same binding twice is caught before wgpu.
    let twice = [Binding::new(0, &src), Binding::new(0, &src)];
    let err = gpu.dispatch(&m, "main", &twice, [1, 1, 1]).unwrap_err();
    assert!(matches!(err, GpuError::BadInput { .. }), "{err:?}");

    // naga accepts this shader, but no device runs a million invocations per workgroup: the
    // pipeline fails to build and the dispatch reports it.
    let huge = module(
        "huge workgroup",
        "@group(0) @binding(0) var<storage, read_write> d: array<u32>;
         @compute @workgroup_size(1024, 1024, 1)
         fn main(@builtin(local_invocation_index) l: u32) { d[l] = l; }",
    );
    let err = gpu
        .dispatch(&huge, "main", &[Binding::new(0, &dst)], [1, 1, 1])
        .unwrap_err();
    assert!(matches!(err, GpuError::Validation { .. }), "{err:?}");
    assert!(err.to_string().contains("huge workgroup"), "{err}");

    // The failures left the device usable.
    let ok = [
        Binding::new(0, &src),
        Binding::new(1, &dst),
        Binding::new(2, &params),
    ];
    gpu.dispatch(&m, "main", &ok, [1, 1, 1]).unwrap();
    assert_eq!(dst.read_back::<u32>().unwrap(), vec![2u32; 64]);
}

#[test]
fn a_name_that_matches_no_adapter_lists_the_available_ones() {
    let choice = AdapterChoice {
        name_contains: Some("no-such-adapter-3f9a".to_string()),
        ..AdapterChoice::default()
    };
    match Gpu::with_choice(choice).unwrap_err() {
        GpuError::NoMatchingAdapter { wanted, available } => {
            assert_eq!(wanted, "no-such-adapter-3f9a");
            assert!(
                !available.is_empty(),
                "the shared test adapter should be listed"
            );
            let own = &gpu().info().name;
            assert!(
                available.iter().any(|a| a.contains(own.as_str())),
                "{available:?}"
            );
        }
        other => panic!("expected NoMatchingAdapter, got {other:?}"),
    }
}

#[test]
fn no_adapter_message_says_how_to_get_one() {
    let msg = GpuError::NoAdapter {
        tried: "backends VULKAN".into(),
    }
    .to_string();
    assert!(msg.contains("no GPU adapter"), "{msg}");
    assert!(msg.contains("apt-get install mesa-vulkan-drivers"), "{msg}");
    assert!(
        msg.contains("FBLAYOUT_ADAPTER") && msg.contains("FBLAYOUT_BACKEND"),
        "{msg}"
    );
}

// ---------------------------------------------------------------------------------------------
// The index probe.

/// Hand-written row-major and column-major layouts of a 3-D tensor with dynamic extents.
const DENSE_3D: &str = "
fn rm_offset(i: u32, j: u32, k: u32, d0: u32, d1: u32, d2: u32) -> u32 {
    return (i * d1 + j) * d2 + k;
}
fn rm_in_bounds(i: u32, j: u32, k: u32, d0: u32, d1: u32, d2: u32) -> bool {
    return i < d0 && j < d1 && k < d2;
}
fn cm_offset(i: u32, j: u32, k: u32, d0: u32, d1: u32, d2: u32) -> u32 {
    return i + d0 * (j + d1 * k);
}
fn cm_in_bounds(i: u32, j: u32, k: u32, d0: u32, d1: u32, d2: u32) -> bool {
    return i < d0 && j < d1 && k < d2;
}
";

/// All coordinates of `shape` in row-major order.
fn coords(shape: &[u32]) -> Vec<Vec<u32>> {
    let mut all = vec![vec![]];
    for &n in shape {
        all = all
            .into_iter()
            .flat_map(|prefix| {
                (0..n).map(move |c| {
                    let mut v = prefix.clone();
                    v.push(c);
                    v
                })
            })
            .collect();
    }
    all
}

fn probe(module: &WgslModule, name: &str, shape: &[u32], extents: &[u32]) -> Vec<Option<u32>> {
    let offset_fn = format!("{name}_offset");
    let in_bounds_fn = format!("{name}_in_bounds");
    let req = ProbeRequest {
        module,
        offset_fn: &offset_fn,
        in_bounds_fn: &in_bounds_fn,
        shape,
        extent_args: extents,
    };
    probe_offsets(gpu(), &req).unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn probe_matches_row_and_column_major_formulas() {
    let m = module("dense3d", DENSE_3D);
    let [d0, d1, d2] = [3u32, 4, 5];
    let shape = [d0, d1, d2];
    let all = coords(&shape);

    let rm = probe(&m, "rm", &shape, &shape);
    let cm = probe(&m, "cm", &shape, &shape);
    assert_eq!(rm.len(), 60);
    assert_eq!(cm.len(), 60);
    for (n, c) in all.iter().enumerate() {
        let (i, j, k) = (c[0], c[1], c[2]);
        assert_eq!(rm[n], Some((i * d1 + j) * d2 + k), "row-major at {c:?}");
        assert_eq!(cm[n], Some(i + d0 * (j + d1 * k)), "column-major at {c:?}");
    }
    // Row-major enumeration of a row-major layout is the identity; column-major is a permutation.
    assert_eq!(rm, (0..60).map(Some).collect::<Vec<_>>());
    let mut sorted: Vec<u32> = cm.iter().map(|o| o.unwrap()).collect();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..60).collect::<Vec<_>>());

    // Enumerating past the extents: the extra coordinates are out of bounds.
    let wide = [4u32, 4, 6];
    let rm = probe(&m, "rm", &wide, &shape);
    for (n, c) in coords(&wide).iter().enumerate() {
        let inside = c[0] < d0 && c[1] < d1 && c[2] < d2;
        let expected = inside.then(|| (c[0] * d1 + c[1]) * d2 + c[2]);
        assert_eq!(rm[n], expected, "at {c:?}");
    }
}

#[test]
fn probe_padded_tiles_reports_out_of_bounds_as_none() {
    // 4x4 tiles, row-major within a tile and across tiles, over a 6x10 tensor: 2x3 tiles
    // (8x12 padded), each stored as 16 consecutive elements.
    let m = module(
        "tiled",
        "
fn tile_offset(i: u32, j: u32, rows: u32, cols: u32) -> u32 {
    let tiles_per_row = (cols + 3u) / 4u;
    return ((i / 4u) * tiles_per_row + j / 4u) * 16u + (i % 4u) * 4u + j % 4u;
}
fn tile_in_bounds(i: u32, j: u32, rows: u32, cols: u32) -> bool {
    return i < rows && j < cols;
}
",
    );
    let (rows, cols) = (6u32, 10u32);
    let shape = [8u32, 12];
    let got = probe(&m, "tile", &shape, &[rows, cols]);
    assert_eq!(got.len(), 96);
    let mut seen = std::collections::HashSet::new();
    for (n, c) in coords(&shape).iter().enumerate() {
        let (i, j) = (c[0], c[1]);
        if i < rows && j < cols {
            let expected = ((i / 4) * 3 + j / 4) * 16 + (i % 4) * 4 + j % 4;
            assert_eq!(got[n], Some(expected), "at ({i}, {j})");
            assert!(expected < 96, "offset {expected} outside the 2x3 tiles");
            assert!(seen.insert(expected), "offset {expected} repeated");
        } else {
            assert_eq!(got[n], None, "padding at ({i}, {j}) must be out of bounds");
        }
    }
    assert_eq!(seen.len(), 60);
    assert_eq!(got.iter().filter(|o| o.is_none()).count(), 96 - 60);
}

#[test]
fn probe_of_one_coordinate_and_no_extents_binds_only_what_it_reads() {
    // One coordinate needs no decoding and there are no extents: the dims buffer is unused
    // and must not be bound (an unused binding is dropped from the automatic layout).
    let m = module(
        "one",
        "fn one_offset(i: u32) -> u32 { return i * 3u; }\n\
         fn one_in_bounds(i: u32) -> bool { return i < 4u; }\n",
    );
    let got = probe(&m, "one", &[6], &[]);
    assert_eq!(got, [Some(0), Some(3), Some(6), Some(9), None, None]);
}

#[test]
fn probe_handles_the_arity_limits_and_empty_shapes() {
    // Eight coordinates and eight extents: offset = sum of c_k * e_k (e_k as strides).
    let params: Vec<String> = (0..8)
        .map(|k| format!("c{k}: u32"))
        .chain((0..8).map(|k| format!("e{k}: u32")))
        .collect();
    let sum: Vec<String> = (0..8).map(|k| format!("c{k} * e{k}")).collect();
    let src = format!(
        "fn big_offset({p}) -> u32 {{ return {s}; }}\n\
         fn big_in_bounds({p}) -> bool {{ return c0 + c7 != 2u; }}\n\
         fn none_offset() -> u32 {{ return 42u; }}\n\
         fn none_in_bounds() -> bool {{ return true; }}\n",
        p = params.join(", "),
        s = sum.join(" + ")
    );
    let m = module("arity", &src);
    let shape = [2u32, 1, 2, 1, 2, 1, 2, 2];
    let strides = [1u32, 10, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000];
    let got = probe(&m, "big", &shape, &strides);
    let all = coords(&shape);
    assert_eq!(got.len(), all.len());
    assert_eq!(got.len(), 32);
    for (n, c) in all.iter().enumerate() {
        let expected =
            (c[0] + c[7] != 2).then(|| c.iter().zip(&strides).map(|(c, s)| c * s).sum::<u32>());
        assert_eq!(got[n], expected, "at {c:?}");
    }

    // No coordinates at all: one point.
    assert_eq!(probe(&m, "none", &[], &[]), vec![Some(42)]);
    // A zero extent: nothing to enumerate.
    let dense = module("dense3d", DENSE_3D);
    assert_eq!(
        probe(&dense, "rm", &[3, 0, 5], &[3, 0, 5]),
        Vec::<Option<u32>>::new()
    );
}

fn probe_err(req: ProbeRequest<'_>) -> GpuError {
    match probe_offsets(gpu(), &req) {
        Ok(v) => panic!(
            "probe of {:?} should fail, got {} values",
            req.offset_fn,
            v.len()
        ),
        Err(err) => err,
    }
}

#[test]
fn probe_rejects_bad_requests() {
    let m = module("dense3d", DENSE_3D);
    let ok = ProbeRequest {
        module: &m,
        offset_fn: "rm_offset",
        in_bounds_fn: "rm_in_bounds",
        shape: &[3, 4, 5],
        extent_args: &[3, 4, 5],
    };
    assert_eq!(probe_offsets(gpu(), &ok).unwrap().len(), 60);

    let bad_input = |err: GpuError, needle: &str| {
        assert!(matches!(err, GpuError::BadInput { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(needle), "`{needle}` not in: {msg}");
    };
    // A function that does not exist.
    bad_input(
        probe_err(ProbeRequest {
            offset_fn: "xx_offset",
            ..ok
        }),
        "`xx_offset`",
    );
    bad_input(
        probe_err(ProbeRequest {
            in_bounds_fn: "xx_in_bounds",
            ..ok
        }),
        "`xx_in_bounds`",
    );
    // Too few parameters for the functions: the extents left out.
    bad_input(
        probe_err(ProbeRequest {
            extent_args: &[],
            ..ok
        }),
        "takes 6 parameters",
    );
    // A shape of the wrong length.
    bad_input(
        probe_err(ProbeRequest {
            shape: &[3, 4, 5, 1],
            ..ok
        }),
        "takes 6 parameters",
    );
    bad_input(
        probe_err(ProbeRequest {
            shape: &[3, 4],
            ..ok
        }),
        "`rm_offset`",
    );
    // The functions swapped: wrong return types.
    bad_input(
        probe_err(ProbeRequest {
            offset_fn: "rm_in_bounds",
            in_bounds_fn: "rm_offset",
            ..ok
        }),
        "does not return u32",
    );
    // Past the arity limits.
    let nine = [1u32; MAX_PROBE_COORDS + 1];
    bad_input(probe_err(ProbeRequest { shape: &nine, ..ok }), "at most 8");
    bad_input(
        probe_err(ProbeRequest {
            extent_args: &nine,
            ..ok
        }),
        "at most 8",
    );
    // Too many points for one probe.
    bad_input(
        probe_err(ProbeRequest {
            shape: &[65_536, 65_536, 2],
            ..ok
        }),
        "more than 2147483648 points",
    );

    // A module that already defines the probe's entry point fails naga validation of the
    // extended module, as a shader error.
    let clash = module(
        "clash",
        &format!("{DENSE_3D}\n@compute @workgroup_size(1) fn {PROBE_ENTRY}() {{}}\n"),
    );
    let err = probe_err(ProbeRequest {
        module: &clash,
        ..ok
    });
    assert!(matches!(err, GpuError::Shader(_)), "{err:?}");
    assert!(err.to_string().contains("clash+probe"), "{err}");
}

mod batches_pool_and_cache {
    use super::gpu;
    use fblayout_core::kernel::{KernelModule, KernelSource, Operand, ParamValue, Scalar};
    use fblayout_core::layout::LayoutSpec;
    use fblayout_kernels::runtime::{
        Batch, CacheLoad, Disabled, Gpu, GpuBuffer, GpuError, GpuOptions,
    };

    /// `y = x · k + i` over a run-time number of elements, with `k` a scalar parameter.
    fn scale_kernel(gpu: &Gpu) -> KernelModule {
        let x = LayoutSpec::new("x").dyn_axis("n").build().unwrap();
        KernelSource::new("scale")
            .operand(Operand::read("x", &x.view()).unwrap())
            .operand(Operand::write("y", &x.view()).unwrap())
            .scalar("k", Scalar::F32)
            .features(gpu.wgsl_features())
            .body(
                "@compute @workgroup_size(64)
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) {
                     if (id.x < y_dim0()) {
                         y_store(id.x, x_load(id.x) * params.k + f32(id.x));
                     }
                 }",
            )
            .build()
            .unwrap()
    }

    /// Records the scale kernel (`y = x · k + i`) over `n` elements, in `groups` workgroups.
    fn scale(
        batch: &mut Batch<'_>,
        kernel: &KernelModule,
        (x, y): (&GpuBuffer, &GpuBuffer),
        (n, k): (u32, f32),
        groups: u32,
    ) {
        batch
            .dispatch(
                kernel,
                "main",
                &[("x", x), ("y", y)],
                &params(n, k),
                [groups, 1, 1],
            )
            .unwrap();
    }

    fn params(n: u32, k: f32) -> [(&'static str, ParamValue); 3] {
        [
            ("x.n_len", ParamValue::U32(n)),
            ("y.n_len", ParamValue::U32(n)),
            ("k", ParamValue::F32(k)),
        ]
    }

    #[test]
    fn one_submit_runs_many_dispatches_each_with_its_own_parameters() {
        let gpu = gpu();
        let kernel = scale_kernel(gpu);
        let n = 300u32;
        let input: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
        let x = GpuBuffer::from_slice(gpu, &input).unwrap();
        let outs: Vec<GpuBuffer> = (0..20)
            .map(|_| GpuBuffer::from_slice(gpu, &vec![f32::NAN; n as usize]).unwrap())
            .collect();
        let mut batch = gpu.batch();
        for (j, y) in outs.iter().enumerate() {
            batch
                .dispatch(
                    &kernel,
                    "main",
                    &[("x", &x), ("y", y)],
                    &params(n, j as f32),
                    [5, 1, 1],
                )
                .unwrap();
        }
        assert_eq!(batch.len(), 20);
        batch.submit().unwrap();
        for (j, y) in outs.iter().enumerate() {
            let got = y.read_back::<f32>().unwrap();
            for (i, g) in got.iter().enumerate() {
                assert_eq!(
                    *g,
                    input[i] * j as f32 + i as f32,
                    "dispatch {j}, element {i}"
                );
            }
        }
    }

    /// `y = x · k + c`: a kernel of its own code for each `c`.
    fn offset_kernel(gpu: &Gpu, c: u32) -> KernelModule {
        let x = LayoutSpec::new("x").dyn_axis("n").build().unwrap();
        KernelSource::new(format!("offset {c}"))
            .operand(Operand::read("x", &x.view()).unwrap())
            .operand(Operand::write("y", &x.view()).unwrap())
            .scalar("k", Scalar::F32)
            .features(gpu.wgsl_features())
            .body(format!(
                "@compute @workgroup_size(64)
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) {{
                     if (id.x < y_dim0()) {{
                         y_store(id.x, x_load(id.x) * params.k + {c}.0);
                     }}
                 }}"
            ))
            .build()
            .unwrap()
    }

    #[test]
    fn a_batch_compiles_its_new_pipelines_together_when_it_is_finished() {
        // A device of its own, so that no other test has compiled these pipelines.
        let gpu = Gpu::new().unwrap_or_else(|err| panic!("no GPU adapter: {err}"));
        let kernels: Vec<KernelModule> = (0..6).map(|c| offset_kernel(&gpu, c)).collect();
        let n = 100u32;
        let input: Vec<f32> = (0..n).map(|i| i as f32 - 50.0).collect();
        let x = GpuBuffer::from_slice(&gpu, &input).unwrap();
        let outs: Vec<GpuBuffer> = (0..12)
            .map(|_| GpuBuffer::from_slice(&gpu, &vec![f32::NAN; n as usize]).unwrap())
            .collect();
        // Twelve dispatches of six kernels, each kernel twice.
        let record = || {
            let mut batch = gpu.batch();
            for (j, y) in outs.iter().enumerate() {
                let kernel = &kernels[j % kernels.len()];
                let params = params(n, j as f32);
                batch
                    .dispatch(kernel, "main", &[("x", &x), ("y", y)], &params, [2, 1, 1])
                    .unwrap();
            }
            batch
        };
        let before = gpu.compile_stats();
        let batch = record();
        // Recording compiled nothing: the batch waits for its pipelines until it is finished.
        assert_eq!(gpu.cached_pipelines(), 0);
        assert_eq!(gpu.compile_stats(), before);
        let recording = batch.finish().unwrap();
        assert_eq!(gpu.cached_pipelines(), 6, "one pipeline per kernel");
        let stats = gpu.compile_stats();
        assert_eq!(stats.pipelines - before.pipelines, 6);
        assert!(stats.waited > before.waited && stats.compiling > before.compiling);
        drop(recording);
        // A second batch of the same kernels compiles nothing and still runs each dispatch
        // with its own kernel and parameters, in order.
        record().submit().unwrap();
        assert_eq!(gpu.compile_stats().pipelines, stats.pipelines);
        for (j, y) in outs.iter().enumerate() {
            let c = (j % kernels.len()) as f32;
            let got = y.read_back::<f32>().unwrap();
            for (i, g) in got.iter().enumerate() {
                assert_eq!(*g, input[i] * j as f32 + c, "dispatch {j}, element {i}");
            }
        }
    }

    #[test]
    fn dispatches_chain_in_recorded_order_within_one_submit() {
        let gpu = gpu();
        let kernel = scale_kernel(gpu);
        let n = 64u32;
        let a = GpuBuffer::from_slice(gpu, &vec![1.0f32; n as usize]).unwrap();
        let b = GpuBuffer::scratch::<f32>(gpu, n as usize).unwrap();
        let c = GpuBuffer::scratch::<f32>(gpu, n as usize).unwrap();
        let mut batch = gpu.batch();
        scale(&mut batch, &kernel, (&a, &b), (n, 2.0), 1);
        scale(&mut batch, &kernel, (&b, &c), (n, 3.0), 1);
        batch.copy(&c, &a, u64::from(n) * 4).unwrap();
        batch.clear(&b);
        batch.submit().unwrap();
        let want: Vec<f32> = (0..n).map(|i| (2.0 + i as f32) * 3.0 + i as f32).collect();
        assert_eq!(a.read_back::<f32>().unwrap(), want);
        assert_eq!(b.read_back::<f32>().unwrap(), vec![0.0; n as usize]);
    }

    #[test]
    fn bad_dispatches_are_refused_before_anything_is_recorded() {
        let gpu = gpu();
        let kernel = scale_kernel(gpu);
        let x = GpuBuffer::from_slice(gpu, &[1.0f32; 8]).unwrap();
        let y = GpuBuffer::scratch::<f32>(gpu, 8).unwrap();
        let mut batch = gpu.batch();
        let p = params(8, 1.0);
        let err = |r: Result<(), GpuError>| r.unwrap_err().to_string();
        assert!(
            err(batch.dispatch(&kernel, "main", &[("x", &x)], &p, [1, 1, 1]))
                .contains("`y` is not bound")
        );
        assert!(
            err(batch.dispatch(
                &kernel,
                "main",
                &[("x", &x), ("y", &y), ("z", &y)],
                &p,
                [1, 1, 1]
            ))
            .contains("no operand `z`")
        );
        assert!(
            err(batch.dispatch(&kernel, "main", &[("x", &x), ("x", &y)], &p, [1, 1, 1]))
                .contains("twice")
        );
        assert!(
            err(batch.dispatch(&kernel, "main", &[("x", &y), ("y", &y)], &p, [1, 1, 1]))
                .contains("one buffer")
        );
        assert!(
            err(batch.dispatch(&kernel, "nope", &[("x", &x), ("y", &y)], &p, [1, 1, 1]))
                .contains("nope")
        );
        let short = [("x.n_len", ParamValue::U32(8)), ("k", ParamValue::F32(1.0))];
        assert!(
            err(batch.dispatch(&kernel, "main", &[("x", &x), ("y", &y)], &short, [1, 1, 1]))
                .contains("y.n_len")
        );
        let wrong_type = [
            ("x.n_len", ParamValue::U32(8)),
            ("y.n_len", ParamValue::U32(8)),
            ("k", ParamValue::U32(1)),
        ];
        assert!(
            err(batch.dispatch(
                &kernel,
                "main",
                &[("x", &x), ("y", &y)],
                &wrong_type,
                [1, 1, 1]
            ))
            .contains("f32")
        );
        let too_wide = [gpu.max_workgroups_per_dimension() + 1, 1, 1];
        assert!(
            err(batch.dispatch(&kernel, "main", &[("x", &x), ("y", &y)], &p, too_wide))
                .contains("grid")
        );
        assert!(batch.is_empty());
    }

    #[test]
    fn a_repeated_step_allocates_nothing_after_its_first_run() {
        // A device of its own, so other tests' buffers don't count.
        let gpu = Gpu::with_options(GpuOptions {
            cache_dir: None,
            ..GpuOptions::from_env().unwrap()
        })
        .unwrap();
        let kernel = scale_kernel(&gpu);
        let step = |gpu: &Gpu| {
            let x = GpuBuffer::from_slice(gpu, &[1.5f32; 1000]).unwrap();
            let h = GpuBuffer::scratch::<f32>(gpu, 1000).unwrap();
            let y = GpuBuffer::scratch::<f32>(gpu, 1000).unwrap();
            let mut batch = gpu.batch();
            scale(&mut batch, &kernel, (&x, &h), (1000, 2.0), 16);
            scale(&mut batch, &kernel, (&h, &y), (1000, 0.5), 16);
            batch.submit().unwrap();
            y.read_back::<f32>().unwrap()
        };
        let first = step(&gpu);
        let after_first = gpu.pool_stats();
        assert!(after_first.allocations > 0);
        for _ in 0..3 {
            assert_eq!(step(&gpu), first);
        }
        let after = gpu.pool_stats();
        assert_eq!(after.allocations, after_first.allocations, "{after:?}");
        assert!(after.reuses >= after_first.reuses + 3 * 4, "{after:?}");
        gpu.trim_pool();
        assert_eq!(gpu.pool_stats().bytes_free, 0);
    }

    #[test]
    fn timed_batches_time_every_dispatch() {
        let gpu = gpu();
        let kernel = scale_kernel(gpu);
        let x = GpuBuffer::from_slice(gpu, &[1.0f32; 4096]).unwrap();
        let y = GpuBuffer::scratch::<f32>(gpu, 4096).unwrap();
        let mut batch = gpu.batch();
        for i in 0..3 {
            if i == 1 {
                batch.section("second");
            }
            scale(&mut batch, &kernel, (&x, &y), (4096, 1.0), 64);
        }
        let timings = batch.submit_timed().unwrap();
        assert_eq!(timings.len(), 3);
        let sections: Vec<Option<&str>> = timings.iter().map(|t| t.section.as_deref()).collect();
        assert_eq!(sections, [None, Some("second"), Some("second")]);
        for t in &timings {
            assert_eq!(t.label, "scale:main");
            assert!(t.nanos >= 0.0 && t.nanos.is_finite(), "{t:?}");
            assert_eq!(t.gpu_timestamps, gpu.features().timestamps);
        }
    }

    #[test]
    fn a_batch_of_more_dispatches_than_one_query_set_holds_is_timed() {
        // Two timestamps a dispatch: more than 2048 dispatches need a second query set (a
        // Llama-family step has thousands).
        let gpu = gpu();
        let kernel = scale_kernel(gpu);
        let x = GpuBuffer::from_slice(gpu, &[1.0f32; 64]).unwrap();
        let y = GpuBuffer::scratch::<f32>(gpu, 64).unwrap();
        let mut batch = gpu.batch();
        let dispatches = wgpu::QUERY_SET_MAX_QUERIES as usize / 2 + 7;
        for i in 0..dispatches {
            if i == dispatches - 1 {
                batch.section("last");
            }
            scale(&mut batch, &kernel, (&x, &y), (64, 1.0), 1);
        }
        let timings = batch.submit_timed().unwrap();
        assert_eq!(timings.len(), dispatches);
        assert_eq!(timings[dispatches - 1].section.as_deref(), Some("last"));
        for t in &timings {
            assert!(t.nanos >= 0.0 && t.nanos.is_finite(), "{t:?}");
            assert_eq!(t.gpu_timestamps, gpu.features().timestamps);
        }
        // The dispatches ran: `y` holds what one of them writes.
        let once = GpuBuffer::scratch::<f32>(gpu, 64).unwrap();
        let mut batch = gpu.batch();
        scale(&mut batch, &kernel, (&x, &once), (64, 1.0), 1);
        batch.submit().unwrap();
        assert_eq!(
            y.read_back::<f32>().unwrap(),
            once.read_back::<f32>().unwrap()
        );
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fblayout-runtime-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_pipeline_cache_persists_and_a_corrupt_file_is_rebuilt() {
        let dir = temp_dir("cache");
        let open = || {
            Gpu::with_options(GpuOptions {
                cache_dir: Some(dir.clone()),
                ..GpuOptions::from_env().unwrap()
            })
            .unwrap()
        };
        let gpu = open();
        if !gpu.features().pipeline_cache {
            assert_eq!(gpu.pipeline_cache_load(), &CacheLoad::Off);
            return;
        }
        let Some(path) = gpu.pipeline_cache_path().map(std::path::Path::to_path_buf) else {
            assert_eq!(gpu.pipeline_cache_load(), &CacheLoad::Unsupported);
            return;
        };
        assert_eq!(gpu.pipeline_cache_load(), &CacheLoad::Empty);
        let run = |gpu: &Gpu| {
            let kernel = scale_kernel(gpu);
            let x = GpuBuffer::from_slice(gpu, &[2.0f32; 64]).unwrap();
            let y = GpuBuffer::scratch::<f32>(gpu, 64).unwrap();
            let mut batch = gpu.batch();
            scale(&mut batch, &kernel, (&x, &y), (64, 3.0), 1);
            batch.submit().unwrap();
            y.read_back::<f32>().unwrap()
        };
        let want = run(&gpu);
        gpu.save_pipeline_cache().unwrap();
        drop(gpu);
        assert!(path.exists());

        let again = open();
        assert!(matches!(again.pipeline_cache_load(), CacheLoad::Loaded { bytes } if *bytes > 0));
        assert_eq!(run(&again), want);
        drop(again);

        // Flip a byte of the driver's data: the checksum catches it, the file is not handed to
        // the driver, and everything still runs.
        let mut raw = std::fs::read(&path).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0x5a;
        std::fs::write(&path, &raw).unwrap();
        let rebuilt = open();
        assert!(
            matches!(rebuilt.pipeline_cache_load(), CacheLoad::Rebuilt { reason } if reason.contains("checksum")),
            "{:?}",
            rebuilt.pipeline_cache_load()
        );
        assert_eq!(run(&rebuilt), want);
        rebuilt.save_pipeline_cache().unwrap();
        drop(rebuilt);
        assert!(matches!(
            open().pipeline_cache_load(),
            CacheLoad::Loaded { .. }
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn turning_features_off_leaves_a_working_device_without_them() {
        let gpu = Gpu::with_options(GpuOptions {
            disabled: Disabled::ALL,
            cache_dir: None,
            ..GpuOptions::from_env().unwrap()
        })
        .unwrap();
        let f = gpu.features();
        assert!(
            !f.f16 && !f.subgroups && !f.timestamps && !f.pipeline_cache,
            "{f:?}"
        );
        assert_eq!(gpu.wgsl_features(), Default::default());
        assert_eq!(gpu.pipeline_cache_load(), &CacheLoad::Off);
        // Timing falls back to the wall clock.
        let kernel = scale_kernel(&gpu);
        let x = GpuBuffer::from_slice(&gpu, &[1.0f32; 64]).unwrap();
        let y = GpuBuffer::scratch::<f32>(&gpu, 64).unwrap();
        let mut batch = gpu.batch();
        scale(&mut batch, &kernel, (&x, &y), (64, 1.0), 1);
        let t = batch.submit_timed().unwrap();
        assert!(!t[0].gpu_timestamps && t[0].nanos > 0.0);
        println!(
            "features of the default device: {}",
            super::gpu().features()
        );
    }

    #[test]
    fn a_recording_runs_again_and_takes_replaced_parameters_and_buffers() {
        let gpu = gpu();
        let kernel = scale_kernel(gpu);
        let n = 100u32;
        let input: Vec<f32> = (0..n).map(|i| i as f32 - 40.0).collect();
        let x = GpuBuffer::from_slice(gpu, &input).unwrap();
        let y = GpuBuffer::scratch::<f32>(gpu, n as usize).unwrap();
        let z = GpuBuffer::scratch::<f32>(gpu, n as usize).unwrap();
        let record = |k1: f32, k2: f32, out: &GpuBuffer| {
            let mut batch = gpu.batch();
            let p1 = params(n, k1);
            let p2 = params(n, k2);
            batch
                .dispatch(&kernel, "main", &[("x", &x), ("y", &y)], &p1, [2, 1, 1])
                .unwrap();
            batch
                .dispatch(&kernel, "main", &[("x", &y), ("y", out)], &p2, [2, 1, 1])
                .unwrap();
            batch
        };
        // y = x·k1 + i, out = y·k2 + i.
        let want = |k1: f32, k2: f32| -> Vec<f32> {
            (0..n)
                .map(|i| (input[i as usize] * k1 + i as f32) * k2 + i as f32)
                .collect()
        };
        let mut recording = record(2.0, 3.0, &z).finish().unwrap();
        assert_eq!(recording.len(), 2);
        for _ in 0..2 {
            z.write(&vec![f32::NAN; n as usize]).unwrap();
            recording.submit().unwrap();
            assert_eq!(z.read_back::<f32>().unwrap(), want(2.0, 3.0));
        }
        // The second dispatch again, with a new factor and into another buffer.
        let w = GpuBuffer::from_slice(gpu, &vec![f32::NAN; n as usize]).unwrap();
        let mut again = gpu.batch();
        let p = params(n, -1.5);
        again
            .dispatch(&kernel, "main", &[("x", &y), ("y", &w)], &p, [2, 1, 1])
            .unwrap();
        recording.replace(1, again).unwrap();
        recording.submit().unwrap();
        assert_eq!(w.read_back::<f32>().unwrap(), want(2.0, -1.5));
        // Both again, timed: the same work, one timing per dispatch.
        recording.replace(0, record(0.5, 4.0, &z)).unwrap();
        let timings = recording.submit_timed().unwrap();
        assert_eq!(timings.len(), 2);
        assert_eq!(z.read_back::<f32>().unwrap(), want(0.5, 4.0));
        // Commands encoded ahead take parameters replaced after them...
        let ahead = recording.encode().unwrap();
        recording.replace(0, record(3.0, 0.25, &z)).unwrap();
        z.write(&vec![f32::NAN; n as usize]).unwrap();
        recording.submit_encoded(ahead).unwrap();
        assert_eq!(z.read_back::<f32>().unwrap(), want(3.0, 0.25));
        // ...but not another buffer: a replacement that changes a bind group makes them stale,
        // and they are encoded again.
        let ahead = recording.encode().unwrap();
        recording.replace(0, record(-2.0, 1.0, &w)).unwrap();
        w.write(&vec![f32::NAN; n as usize]).unwrap();
        recording.submit_encoded(ahead).unwrap();
        assert_eq!(w.read_back::<f32>().unwrap(), want(-2.0, 1.0));
        // Commands of another recording are never submitted for this one.
        let other = record(1.0, 1.0, &z).finish().unwrap();
        let foreign = other.encode().unwrap();
        z.write(&vec![f32::NAN; n as usize]).unwrap();
        recording.submit_encoded(foreign).unwrap();
        assert_eq!(w.read_back::<f32>().unwrap(), want(-2.0, 1.0));
        assert!(z.read_back::<f32>().unwrap().iter().all(|v| v.is_nan()));
    }

    #[test]
    fn a_replacement_that_does_not_fit_is_refused_and_changes_nothing() {
        let gpu = gpu();
        let kernel = scale_kernel(gpu);
        let n = 8u32;
        let x = GpuBuffer::from_slice(gpu, &vec![1.0f32; n as usize]).unwrap();
        let y = GpuBuffer::scratch::<f32>(gpu, n as usize).unwrap();
        let c = GpuBuffer::from_slice(gpu, &vec![7.0f32; n as usize]).unwrap();
        let mut batch = gpu.batch();
        scale(&mut batch, &kernel, (&x, &y), (n, 2.0), 1);
        batch.clear(&c);
        let mut recording = batch.finish().unwrap();
        let message = |e: GpuError| e.to_string();
        // Past the end.
        let mut two = gpu.batch();
        two.clear(&y);
        two.clear(&y);
        assert!(message(recording.replace(1, two).unwrap_err()).contains("do not fit"));
        // A dispatch in place of a clear.
        let mut dispatch = gpu.batch();
        dispatch
            .dispatch(
                &kernel,
                "main",
                &[("x", &x), ("y", &y)],
                &params(n, 5.0),
                [1, 1, 1],
            )
            .unwrap();
        let err = message(recording.replace(1, dispatch).unwrap_err());
        assert!(err.contains("not the same kind of work"), "{err}");
        // Another kernel in place of the dispatch.
        let other = KernelSource::new("other")
            .operand(
                Operand::read(
                    "x",
                    &LayoutSpec::new("x").dyn_axis("n").build().unwrap().view(),
                )
                .unwrap(),
            )
            .operand(
                Operand::write(
                    "y",
                    &LayoutSpec::new("x").dyn_axis("n").build().unwrap().view(),
                )
                .unwrap(),
            )
            .scalar("k", Scalar::F32)
            .features(gpu.wgsl_features())
            .body(
                "@compute @workgroup_size(64)
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) {
                     if (id.x < y_dim0()) { y_store(id.x, x_load(id.x) - params.k); }
                 }",
            )
            .build()
            .unwrap();
        let mut swapped = gpu.batch();
        swapped
            .dispatch(
                &other,
                "main",
                &[("x", &x), ("y", &y)],
                &params(n, 5.0),
                [1, 1, 1],
            )
            .unwrap();
        let err = message(recording.replace(0, swapped).unwrap_err());
        assert!(err.contains("not the same kind of work"), "{err}");
        // Nothing was replaced: the recording still computes y = 2x + i, then clears c.
        y.write(&vec![f32::NAN; n as usize]).unwrap();
        recording.submit().unwrap();
        let want: Vec<f32> = (0..n).map(|i| 2.0 + i as f32).collect();
        assert_eq!(y.read_back::<f32>().unwrap(), want);
        assert_eq!(c.read_back::<f32>().unwrap(), vec![0.0; n as usize]);
    }
}

#[test]
fn a_workspace_lends_its_buffers_in_turn_and_refuses_more_than_it_has() {
    let gpu = gpu();
    let workspace = Workspace::new(gpu, &Scratch::buffer(1024).and(Scratch::buffer(256))).unwrap();
    assert_eq!(workspace.bytes(), 1280);
    let mut batch = gpu.batch();
    batch.use_workspace(&workspace);
    // Each piece of scratch gets the smallest free buffer large enough, as long as asked.
    let a = batch.scratch::<u32>(200).unwrap();
    let b = batch.scratch::<u32>(50).unwrap();
    assert_eq!((a.len_bytes(), b.len_bytes()), (800, 200));
    assert!(!a.same_memory(&b));
    match batch.scratch::<u32>(10).unwrap_err() {
        GpuError::WorkspaceTooSmall { bytes, free, taken } => {
            assert_eq!((bytes, free, taken), (40, vec![], vec![1024, 256]));
        }
        other => panic!("{other}"),
    }
    let taken = batch.release_scratch();
    assert_eq!(taken, Scratch::buffer(800).and(Scratch::buffer(200)));
    // Released, the buffers serve the next piece of work.
    let small = batch.scratch::<u8>(16).unwrap();
    let large = batch.scratch::<u32>(100).unwrap();
    // Lent, not allocated: the same memory as before.
    assert!(small.same_memory(&b) && large.same_memory(&a));
    // Without a workspace, scratch comes from the pool, and is counted all the same.
    let mut alone = gpu.batch();
    let pooled = alone.scratch::<u32>(3).unwrap();
    assert_eq!(pooled.len_bytes(), 12);
    assert_eq!(alone.release_scratch(), Scratch::buffer(12));
    assert!(alone.release_scratch().is_empty());
}
