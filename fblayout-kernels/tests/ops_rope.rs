//! RoPE: the CPU twin against a loop written from the rotation's definition, the backward
//! against finite differences, the GPU against the CPU under row-major, R-Tile (partial tiles),
//! permuted and fused-QKV views (grouped-query heads) in f32 and f16; the tables against known
//! values; a position past the tables as NaN on the GPU and as an error on the host; and typed
//! errors for bad input.

mod support;

use fblayout_core::layout::{BoundView, ElemType, LayoutSpec, Order, View};
use fblayout_kernels::cpu::{OffsetTable, Real};
use fblayout_kernels::ops::rope::{
    RopeAngles, RopeOp, RopeScaling, RopeViews, check_positions, rope_backward_cpu,
    rope_forward_cpu, rope_tables,
};
use fblayout_kernels::ops::{OpError, qkv_views};
use fblayout_kernels::runtime::{Gpu, GpuBuffer};
use fblayout_kernels::tensor::{GpuArg, HostArg};
use support::{
    Rng, Tensor, assert_close, finite_differences, gpu, gpu_elems, static_2d, tolerance,
};

/// Run-time batch and sequence (no tile of 4 divides 7).
const BATCH: u32 = 3;
const SEQ: u32 = 7;
/// Rows of the tables.
const MAX_POSITIONS: u32 = 50;

/// How a `[batch, seq, heads, head_dim]` operand is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Storage {
    /// Row-major.
    RowMajor,
    /// R-Tile: tiles of 4 over `seq` and of `tile` over `head_dim` (its forward axis), both
    /// padded where they don't divide.
    RTile(u32),
    /// Row-major `[batch, heads, seq, head_dim]` read through a permutation.
    HeadsOuter,
    /// The query part of a fused projection of `heads + 2·kv` heads (`kv` key/value heads).
    FusedQ { kv: u32 },
    /// The key part of a fused projection of `group · heads` query heads.
    FusedK { group: u32 },
}

/// A `[batch, seq, heads, head_dim]` view stored as `storage`, `batch` and `seq` run-time.
fn view4(name: &str, storage: Storage, heads: u32, head_dim: u32, elem: ElemType) -> View {
    let spec = LayoutSpec::new(name)
        .elem(elem)
        .dyn_axis("batch")
        .dyn_axis("seq");
    let fused = |q: u32, kv: u32| {
        LayoutSpec::new(name)
            .elem(elem)
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("hidden", (q + 2 * kv) * head_dim)
            .build()
            .unwrap()
            .view()
    };
    match storage {
        Storage::RowMajor => spec
            .axis("heads", heads)
            .axis("head_dim", head_dim)
            .build()
            .unwrap()
            .view(),
        Storage::RTile(t) => spec
            .tile(4, true)
            .axis("heads", heads)
            .axis("head_dim", head_dim)
            .tile(t, true)
            .rtile()
            .reduce_forward(["head_dim"])
            .reduce_backward(["seq"])
            .build()
            .unwrap()
            .view(),
        Storage::HeadsOuter => LayoutSpec::new(name)
            .elem(elem)
            .dyn_axis("batch")
            .axis("heads", heads)
            .dyn_axis("seq")
            .axis("head_dim", head_dim)
            .build()
            .unwrap()
            .view()
            .permute(&["batch", "seq", "heads", "head_dim"])
            .unwrap(),
        Storage::FusedQ { kv } => qkv_views(&fused(heads, kv), heads, kv).unwrap().0,
        Storage::FusedK { group } => {
            qkv_views(&fused(heads * group, heads), heads * group, heads)
                .unwrap()
                .1
        }
    }
}

fn tokens() -> Vec<(String, u32)> {
    vec![("batch".to_owned(), BATCH), ("seq".to_owned(), SEQ)]
}

/// The positions `[batch, seq]` of `u32`: their view bound to the run-time extents, and
/// their values row-major.
#[derive(Debug, Clone)]
struct Positions {
    view: View,
    bound: BoundView,
    values: Vec<u32>,
}

impl Positions {
    /// Random positions below `MAX_POSITIONS`, the last one included, stored row-major or
    /// (`transposed`) as `[seq, batch]` read through its transpose.
    fn random(rng: &mut Rng, transposed: bool) -> Self {
        let spec = LayoutSpec::new("positions").elem(ElemType::U32);
        let view = if transposed {
            spec.dyn_axis("seq")
                .dyn_axis("batch")
                .build()
                .unwrap()
                .view()
                .transpose("seq", "batch")
                .unwrap()
        } else {
            spec.dyn_axis("batch")
                .dyn_axis("seq")
                .build()
                .unwrap()
                .view()
        };
        let mut values: Vec<u32> = (0..BATCH * SEQ)
            .map(|_| rng.below(u64::from(MAX_POSITIONS)) as u32)
            .collect();
        values[1] = MAX_POSITIONS - 1;
        Self::new(view, values)
    }

    fn new(view: View, values: Vec<u32>) -> Self {
        let bound = view.bind(&[("batch", BATCH), ("seq", SEQ)]).unwrap();
        Self {
            view,
            bound,
            values,
        }
    }

    /// The physical buffer (padding, if any, past the tables).
    fn host(&self) -> Vec<u32> {
        let mut buf = vec![u32::MAX; self.bound.len() as usize];
        self.bound
            .for_each(|i, _, off| buf[off as usize] = self.values[i]);
        buf
    }

    fn arg<'a>(&self, data: &'a [u32]) -> HostArg<'a, u32, OffsetTable> {
        HostArg::bound(data, &self.bound).unwrap()
    }

    fn upload(&self, gpu: &Gpu) -> GpuBuffer {
        GpuBuffer::from_slice(gpu, &self.host()).unwrap()
    }

    fn gpu_arg<'a>(&'a self, buffer: &'a GpuBuffer) -> GpuArg<'a> {
        GpuArg::bound(buffer, &self.view, self.bound.clone()).unwrap()
    }
}

/// Positions and tables.
#[derive(Debug, Clone)]
struct Angles {
    positions: Positions,
    cos: Tensor,
    sin: Tensor,
}

impl Angles {
    /// Random positions and tables of `head_dim/2` columns (random values: the rotation's
    /// definition holds for any table), the tables row-major or column-major.
    fn random(rng: &mut Rng, head_dim: u32, transposed: bool, order: Order) -> Self {
        let table = |rng: &mut Rng, name: &str| {
            let view = static_2d(name, MAX_POSITIONS, head_dim / 2, ElemType::F32, order);
            // f32 values, so that the f64 oracle reads what the kernels read.
            let t = Tensor::random(rng, view, vec![], -1.0, 1.0);
            let values = t.values.iter().map(|&v| f64::from(v as f32)).collect();
            t.with_values(values)
        };
        Self {
            positions: Positions::random(rng, transposed),
            cos: table(rng, "cos"),
            sin: table(rng, "sin"),
        }
    }

    fn views<'a>(&'a self, x: &'a View, y: &'a View) -> RopeViews<'a> {
        RopeViews {
            x,
            y,
            positions: &self.positions.view,
            cos: &self.cos.view,
            sin: &self.sin.view,
        }
    }
}

/// The rotation of `input` into `output` on the CPU, stored as `I` and `O`.
fn cpu_as<I: Real, O: Real>(
    backward: bool,
    input: &Tensor,
    angles: &Angles,
    output: &Tensor,
) -> Result<Vec<f64>, OpError> {
    let i = input.host::<I>();
    let mut o = output.host::<O>();
    let p = angles.positions.host();
    let (c, s) = (angles.cos.host::<f32>(), angles.sin.host::<f32>());
    let (i, p, c, s) = (
        input.arg(&i),
        angles.positions.arg(&p),
        angles.cos.arg(&c),
        angles.sin.arg(&s),
    );
    let mut out = output.arg_mut(&mut o);
    if backward {
        rope_backward_cpu::<I, O, f32>(&i, &p, &c, &s, &mut out)?;
    } else {
        rope_forward_cpu::<I, O, f32>(&i, &p, &c, &s, &mut out)?;
    }
    drop(out);
    Ok(output.read_host(&o))
}

/// [`cpu_as`] in the operands' element types.
fn cpu(backward: bool, input: &Tensor, angles: &Angles, output: &Tensor) -> Vec<f64> {
    use half::f16;
    let got = match (input.elem(), output.elem()) {
        (ElemType::F32, ElemType::F32) => cpu_as::<f32, f32>(backward, input, angles, output),
        (ElemType::F32, ElemType::F16) => cpu_as::<f32, f16>(backward, input, angles, output),
        (ElemType::F16, ElemType::F32) => cpu_as::<f16, f32>(backward, input, angles, output),
        (ElemType::F16, ElemType::F16) => cpu_as::<f16, f16>(backward, input, angles, output),
        other => panic!("no CPU rotation for {other:?}"),
    };
    got.unwrap()
}

/// The rotation written from its definition, on dense row-major `[batch, seq, heads, d]`
/// values: `backward` rotates by −θ.
fn oracle(x: &[f64], dims: [usize; 4], angles: &Angles, backward: bool) -> Vec<f64> {
    let [b_n, s_n, h_n, d] = dims;
    let half = d / 2;
    let sign = if backward { -1.0 } else { 1.0 };
    let mut y = vec![0.0; x.len()];
    for b in 0..b_n {
        for s in 0..s_n {
            let p = angles.positions.values[b * s_n + s] as usize;
            for h in 0..h_n {
                let base = ((b * s_n + s) * h_n + h) * d;
                for i in 0..half {
                    let c = angles.cos.values[p * half + i];
                    let sn = sign * angles.sin.values[p * half + i];
                    let (lo, hi) = (x[base + i], x[base + i + half]);
                    y[base + i] = lo * c - hi * sn;
                    y[base + i + half] = hi * c + lo * sn;
                }
            }
        }
    }
    y
}

/// An operand stored as `storage` with random values, and a second one of `out` storage to
/// write into.
fn operands(
    rng: &mut Rng,
    (input, output): (Storage, Storage),
    heads: u32,
    head_dim: u32,
    elems: (ElemType, ElemType),
) -> (Tensor, Tensor) {
    let x = Tensor::random(
        rng,
        view4("x", input, heads, head_dim, elems.0),
        tokens(),
        -2.0,
        2.0,
    );
    let yv = view4("y", output, heads, head_dim, elems.1);
    let n = x.values.len();
    let y = Tensor::new(yv, tokens(), vec![0.0; n]);
    (x, y)
}

#[test]
fn cpu_matches_the_definition_forward_and_backward() {
    let mut rng = Rng::new(1);
    let cases = [
        (Storage::RowMajor, Storage::RowMajor, 3, 16),
        (Storage::RTile(8), Storage::HeadsOuter, 2, 12),
        (Storage::FusedQ { kv: 2 }, Storage::RTile(4), 4, 8),
        (
            Storage::FusedK { group: 2 },
            Storage::FusedQ { kv: 1 },
            2,
            6,
        ),
    ];
    for (i, o, heads, d) in cases {
        let what = format!("{i:?} → {o:?}, {heads} heads of {d}");
        let angles = Angles::random(&mut rng, d, i == Storage::RowMajor, Order::RowMajor);
        let (x, y) = operands(&mut rng, (i, o), heads, d, (ElemType::F32, ElemType::F32));
        let dims = [BATCH as usize, SEQ as usize, heads as usize, d as usize];
        let got = cpu_as::<f64, f64>(false, &x, &angles, &y).unwrap();
        assert_close(&what, &got, &oracle(&x.values, dims, &angles, false), 1e-15);
        // The backward reads through y's view and writes through x's.
        let dy = Tensor::random(&mut rng, y.view.clone(), tokens(), -1.0, 1.0);
        let got = cpu_as::<f64, f64>(true, &dy, &angles, &x).unwrap();
        let want = oracle(&dy.values, dims, &angles, true);
        assert_close(&format!("d {what}"), &got, &want, 1e-15);
    }
}

#[test]
fn backward_is_the_gradient_of_the_forward() {
    let mut rng = Rng::new(2);
    for (i, o) in [
        (Storage::RowMajor, Storage::RTile(4)),
        (Storage::FusedQ { kv: 2 }, Storage::HeadsOuter),
    ] {
        let (heads, d) = (4, 8);
        let angles = Angles::random(&mut rng, d, false, Order::RowMajor);
        let (x, y) = operands(&mut rng, (i, o), heads, d, (ElemType::F32, ElemType::F32));
        let w = Tensor::random(&mut rng, y.view.clone(), tokens(), -1.0, 1.0);
        // L(x) = Σ w ⊙ rope(x): dL/dx = ropeᵀ(w). L is linear, so a wide step loses nothing.
        let got = cpu_as::<f64, f64>(true, &w, &angles, &x).unwrap();
        let want = finite_differences(&x.values, 0.5, |v| {
            let y = cpu_as::<f64, f64>(false, &x.with_values(v.to_vec()), &angles, &y).unwrap();
            y.iter().zip(&w.values).map(|(a, b)| a * b).sum()
        });
        assert_close(&format!("{i:?} → {o:?}"), &got, &want, 1e-12);
    }
}

/// Reads `buffer` (of `t`'s layout) whole, as `f64`.
fn raw(t: &Tensor, buffer: &GpuBuffer) -> Vec<f64> {
    match t.elem() {
        ElemType::F16 => buffer
            .read_back::<half::f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f64())
            .collect(),
        _ => buffer
            .read_back::<f32>()
            .unwrap()
            .iter()
            .map(|&v| f64::from(v))
            .collect(),
    }
}

/// Fails when an element of `buffer` outside `t`'s view is not NaN any more: the kernel wrote
/// where it must not (the other parts of a fused projection, padding).
#[track_caller]
fn assert_outside_untouched(what: &str, t: &Tensor, buffer: &GpuBuffer) {
    let all = raw(t, buffer);
    let mut inside = vec![false; all.len()];
    t.bound.for_each(|_, _, off| inside[off as usize] = true);
    let touched = (0..t.bound.len() as usize)
        .filter(|&i| !inside[i] && !all[i].is_nan())
        .count();
    assert_eq!(touched, 0, "{what}: elements outside the view were written");
}

/// The forward and the backward on the GPU against the CPU; returns whether the kernels moved
/// four pairs at once.
fn check_gpu(
    gpu: &Gpu,
    what: &str,
    x: &Tensor,
    y: &Tensor,
    angles: &Angles,
    rng: &mut Rng,
) -> bool {
    let op =
        RopeOp::new(gpu, &angles.views(&x.view, &y.view)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let dy = Tensor::random(rng, y.view.clone(), tokens(), -1.0, 1.0);
    let (xb, yb, dyb, dxb) = (
        x.upload(gpu),
        y.poisoned(gpu),
        dy.upload(gpu),
        x.poisoned(gpu),
    );
    let (pb, cb, sb) = (
        angles.positions.upload(gpu),
        angles.cos.upload(gpu),
        angles.sin.upload(gpu),
    );
    let rope = RopeAngles {
        positions: angles.positions.gpu_arg(&pb),
        cos: angles.cos.gpu_arg(&cb),
        sin: angles.sin.gpu_arg(&sb),
    };
    let mut batch = gpu.batch();
    op.forward(&mut batch, &x.gpu_arg(&xb), &rope, &y.gpu_arg(&yb))
        .unwrap();
    op.backward(&mut batch, &dy.gpu_arg(&dyb), &rope, &x.gpu_arg(&dxb))
        .unwrap();
    batch.submit().unwrap();
    let want_y = cpu(false, x, angles, y);
    let want_dx = cpu(true, &dy, angles, x);
    assert_close(
        &format!("{what}: y"),
        &y.download(&yb),
        &want_y,
        tolerance(y.elem(), 2),
    );
    assert_close(
        &format!("{what}: dx"),
        &x.download(&dxb),
        &want_dx,
        tolerance(x.elem(), 2),
    );
    assert_outside_untouched(&format!("{what}: y"), y, &yb);
    assert_outside_untouched(&format!("{what}: dx"), x, &dxb);
    op.is_vectorized()
}

#[test]
fn gpu_matches_cpu_under_every_storage() {
    let gpu = gpu();
    let mut rng = Rng::new(3);
    // (input, output, heads, head_dim, transposed positions, table order, four pairs at once)
    let cases = [
        (
            Storage::RowMajor,
            Storage::RowMajor,
            3,
            16,
            false,
            Order::RowMajor,
            true,
        ),
        // head_dim/2 = 6 is no multiple of four: one pair per invocation.
        (
            Storage::RowMajor,
            Storage::RowMajor,
            3,
            12,
            true,
            Order::RowMajor,
            false,
        ),
        // Partial tiles: seq 7 in tiles of 4, head_dim 12 in tiles of 8.
        (
            Storage::RTile(8),
            Storage::RowMajor,
            2,
            12,
            false,
            Order::RowMajor,
            false,
        ),
        (
            Storage::RowMajor,
            Storage::RTile(4),
            2,
            16,
            false,
            Order::RowMajor,
            true,
        ),
        (
            Storage::HeadsOuter,
            Storage::RTile(8),
            3,
            16,
            true,
            Order::ColMajor,
            false,
        ),
        // Grouped-query attention: 4 query heads, 2 key/value heads, in one projection.
        (
            Storage::FusedQ { kv: 2 },
            Storage::RowMajor,
            4,
            8,
            false,
            Order::RowMajor,
            true,
        ),
        (
            Storage::FusedK { group: 2 },
            Storage::FusedK { group: 2 },
            2,
            8,
            false,
            Order::RowMajor,
            true,
        ),
        (
            Storage::FusedQ { kv: 1 },
            Storage::FusedQ { kv: 1 },
            2,
            10,
            true,
            Order::RowMajor,
            false,
        ),
    ];
    for (i, o, heads, d, transposed, order, wide) in cases {
        let what = format!("{i:?} → {o:?}, {heads} heads of {d}");
        let angles = Angles::random(&mut rng, d, transposed, order);
        let (x, y) = operands(&mut rng, (i, o), heads, d, (ElemType::F32, ElemType::F32));
        let got = check_gpu(gpu, &what, &x, &y, &angles, &mut rng);
        assert_eq!(got, wide, "{what}: four pairs per invocation");
    }
}

#[test]
fn gpu_matches_cpu_in_f16() {
    let gpu = gpu();
    let elems = gpu_elems();
    if !elems.contains(&ElemType::F16) {
        eprintln!("gpu_matches_cpu_in_f16: the adapter has no f16; f32 only");
    }
    let mut rng = Rng::new(4);
    for (a, b) in [
        (ElemType::F16, ElemType::F32),
        (ElemType::F32, ElemType::F16),
        (ElemType::F16, ElemType::F16),
    ] {
        if !(elems.contains(&a) && elems.contains(&b)) {
            continue;
        }
        for (i, o, heads, d) in [
            (Storage::RowMajor, Storage::RowMajor, 2, 16),
            (Storage::FusedQ { kv: 2 }, Storage::RTile(4), 4, 8),
            (Storage::RTile(8), Storage::FusedK { group: 2 }, 2, 12),
        ] {
            let what = format!("{a} {i:?} → {b} {o:?}");
            let angles = Angles::random(&mut rng, d, false, Order::RowMajor);
            let (x, y) = operands(&mut rng, (i, o), heads, d, (a, b));
            check_gpu(gpu, &what, &x, &y, &angles, &mut rng);
        }
    }
}

#[test]
fn tables_hold_known_values() {
    let (d, rows) = (8u32, 6u32);
    let (cos, sin) = rope_tables(10_000.0, d, rows, RopeScaling::None);
    assert_eq!((cos.len(), sin.len()), (24, 24));
    // Position 0 is the identity.
    assert!(cos[..4].iter().all(|&c| c == 1.0), "{cos:?}");
    assert!(sin[..4].iter().all(|&s| s == 0.0), "{sin:?}");
    // By hand: inv_freq = 10000^(−2i/8) = 1, 0.1, 0.01, 0.001; position 3, i = 1 and 2:
    // angles 0.3 and 0.03.
    let close = |got: f32, want: f64| (f64::from(got) - want).abs() < 1e-7;
    assert!(close(cos[3 * 4 + 1], 0.955_336_489_125_606), "{}", cos[13]);
    assert!(
        close(sin[3 * 4 + 1], 0.295_520_206_661_339_6),
        "{}",
        sin[13]
    );
    assert!(
        close(cos[3 * 4 + 2], 0.999_550_033_748_987_5),
        "{}",
        cos[14]
    );
    assert!(
        close(sin[3 * 4 + 2], 0.029_995_500_202_495_66),
        "{}",
        sin[14]
    );
    // Column 0 turns by one radian per position.
    assert!(close(cos[5 * 4], 5f64.cos()) && close(sin[5 * 4], 5f64.sin()));
    // Linear scaling by 4: position 4k reads what position k reads unscaled.
    let (lcos, lsin) = rope_tables(10_000.0, d, 4 * rows, RopeScaling::Linear { factor: 4.0 });
    for p in 0..rows as usize {
        let (a, b) = (p * 4, 4 * p * 4);
        assert_eq!(lcos[b..b + 4], cos[a..a + 4], "position {}", 4 * p);
        assert_eq!(lsin[b..b + 4], sin[a..a + 4], "position {}", 4 * p);
    }
    // And position 2 scaled by 4 is half a radian along column 0.
    assert!(close(lcos[2 * 4], 0.5f64.cos()) && close(lsin[2 * 4], 0.5f64.sin()));
    // Llama 3's base, heads of 128: the last column's frequency is 500000^(−126/128).
    let (_, sin) = rope_tables(500_000.0, 128, 2, RopeScaling::default());
    let f = 500_000f64.powf(-126.0 / 128.0);
    let relative = (f64::from(sin[64 + 63]) - f.sin()).abs() / f.sin();
    assert!(relative < 1e-6, "{} against {}", sin[127], f.sin());
    assert_eq!(rope_tables(10_000.0, 8, 0, RopeScaling::None).0.len(), 0);
}

#[test]
fn tables_drive_the_kernels() {
    // The tables `rope_tables` makes, read through a row-major [max_positions, d/2] view,
    // rotate a head at position p by p·inv_freq: the rotation keeps each pair's length.
    let gpu = gpu();
    let mut rng = Rng::new(5);
    let d = 16;
    let (cos, sin) = rope_tables(10_000.0, d, MAX_POSITIONS, RopeScaling::None);
    let table = |name: &str, values: &[f32]| {
        let view = static_2d(name, MAX_POSITIONS, d / 2, ElemType::F32, Order::RowMajor);
        Tensor::new(view, vec![], values.iter().map(|&v| f64::from(v)).collect())
    };
    let angles = Angles {
        positions: Positions::random(&mut rng, false),
        cos: table("cos", &cos),
        sin: table("sin", &sin),
    };
    let (x, y) = operands(
        &mut rng,
        (Storage::RowMajor, Storage::RowMajor),
        2,
        d,
        (ElemType::F32, ElemType::F32),
    );
    check_gpu(gpu, "the model's tables", &x, &y, &angles, &mut rng);
    let got = cpu(false, &x, &angles, &y);
    let half = (d / 2) as usize;
    for (head, (a, b)) in x
        .values
        .chunks(d as usize)
        .zip(got.chunks(d as usize))
        .enumerate()
    {
        for i in 0..half {
            let before = a[i].hypot(a[i + half]);
            let after = b[i].hypot(b[i + half]);
            assert!((before - after).abs() < 1e-5, "head {head}, pair {i}");
        }
    }
}

#[test]
fn a_position_past_the_tables_is_an_error_on_the_host_and_nan_on_the_gpu() {
    let gpu = gpu();
    let mut rng = Rng::new(6);
    let d = 8;
    let mut angles = Angles::random(&mut rng, d, false, Order::RowMajor);
    let bad = 4;
    angles.positions.values[bad] = MAX_POSITIONS;
    let err = check_positions(&angles.positions.values, MAX_POSITIONS).unwrap_err();
    assert!(
        matches!(
            err,
            OpError::OutOfRange {
                role: "positions",
                position: 4,
                value: 50,
                limit: 50,
                ..
            }
        ),
        "{err}"
    );
    let (x, y) = operands(
        &mut rng,
        (Storage::RowMajor, Storage::RowMajor),
        2,
        d,
        (ElemType::F32, ElemType::F32),
    );
    let err = cpu_as::<f64, f64>(false, &x, &angles, &y).unwrap_err();
    assert!(
        matches!(
            err,
            OpError::OutOfRange {
                op: "rope forward",
                position: 4,
                ..
            }
        ),
        "{err}"
    );
    let err = cpu_as::<f64, f64>(true, &y, &angles, &x).unwrap_err();
    assert!(matches!(err, OpError::OutOfRange { .. }), "{err}");

    // The GPU masks: the token's elements are NaN, every other token is rotated.
    let op = RopeOp::new(gpu, &angles.views(&x.view, &y.view)).unwrap();
    let (xb, yb) = (x.upload(gpu), y.poisoned(gpu));
    let (pb, cb, sb) = (
        angles.positions.upload(gpu),
        angles.cos.upload(gpu),
        angles.sin.upload(gpu),
    );
    let rope = RopeAngles {
        positions: angles.positions.gpu_arg(&pb),
        cos: angles.cos.gpu_arg(&cb),
        sin: angles.sin.gpu_arg(&sb),
    };
    let mut batch = gpu.batch();
    op.forward(&mut batch, &x.gpu_arg(&xb), &rope, &y.gpu_arg(&yb))
        .unwrap();
    batch.submit().unwrap();
    let got = y.download(&yb);
    let mut good = angles.clone();
    good.positions.values[bad] = 0;
    let want = cpu(false, &x, &good, &y);
    let per_token = (2 * d) as usize;
    for (t, (g, w)) in got
        .chunks(per_token)
        .zip(want.chunks(per_token))
        .enumerate()
    {
        if t == bad {
            assert!(g.iter().all(|v| v.is_nan()), "token {t}: {g:?}");
        } else {
            assert_close(&format!("token {t}"), g, w, tolerance(ElemType::F32, 2));
        }
    }
}

/// Views for the error cases: x and y `[batch, seq, 2, d]` row-major, positions, tables of
/// `cols` columns.
fn plain(d: u32, cols: u32) -> (View, View, View, View, View) {
    let rm = |name: &str, elem| {
        LayoutSpec::new(name)
            .elem(elem)
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("heads", 2)
            .axis("head_dim", d)
            .build()
            .unwrap()
            .view()
    };
    let positions = LayoutSpec::new("positions")
        .elem(ElemType::U32)
        .dyn_axis("batch")
        .dyn_axis("seq")
        .build()
        .unwrap()
        .view();
    let table = |name| static_2d(name, MAX_POSITIONS, cols, ElemType::F32, Order::RowMajor);
    (
        rm("x", ElemType::F32),
        rm("y", ElemType::F32),
        positions,
        table("cos"),
        table("sin"),
    )
}

fn build_err(views: &RopeViews<'_>) -> OpError {
    RopeOp::new(gpu(), views).expect_err("the views are wrong")
}

#[test]
fn bad_views_are_typed_errors() {
    // An odd head.
    let (x, y, p, c, s) = plain(7, 3);
    let views = RopeViews {
        x: &x,
        y: &y,
        positions: &p,
        cos: &c,
        sin: &s,
    };
    let err = build_err(&views);
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    assert!(err.to_string().contains("head_dim is 7"), "{err}");
    // Tables of the wrong width, or of different shapes.
    let (x, y, p, c, s) = plain(8, 3);
    let err = build_err(&RopeViews {
        x: &x,
        y: &y,
        positions: &p,
        cos: &c,
        sin: &s,
    });
    assert!(err.to_string().contains("`cos` has 3 columns"), "{err}");
    let (_, _, _, c4, _) = plain(8, 4);
    let short = static_2d("sin", 10, 4, ElemType::F32, Order::RowMajor);
    let err = build_err(&RopeViews {
        x: &x,
        y: &y,
        positions: &p,
        cos: &c4,
        sin: &short,
    });
    assert!(err.to_string().contains("the tables' rows is 50"), "{err}");
    // x and y of different heads.
    let y3 = view4("y", Storage::RowMajor, 3, 8, ElemType::F32);
    let err = build_err(&RopeViews {
        x: &x,
        y: &y3,
        positions: &p,
        cos: &c4,
        sin: &c4,
    });
    assert!(err.to_string().contains("heads is 2 in `x`"), "{err}");
    // Ranks.
    let flat = static_2d("y", 4, 8, ElemType::F32, Order::RowMajor);
    let err = build_err(&RopeViews {
        x: &x,
        y: &flat,
        positions: &p,
        cos: &c4,
        sin: &c4,
    });
    assert!(err.to_string().contains("`y` has rank 2, not 4"), "{err}");
    let err = build_err(&RopeViews {
        x: &x,
        y: &y,
        positions: &x,
        cos: &c4,
        sin: &c4,
    });
    assert!(
        matches!(
            err,
            OpError::Unsupported {
                role: "positions",
                ..
            }
        ),
        "{err}"
    );
    // Element types.
    let ints = view4("x", Storage::RowMajor, 2, 8, ElemType::U32);
    let err = build_err(&RopeViews {
        x: &ints,
        y: &y,
        positions: &p,
        cos: &c4,
        sin: &c4,
    });
    assert!(
        matches!(err, OpError::Unsupported { role: "x", .. }),
        "{err}"
    );
    let floats = LayoutSpec::new("positions")
        .dyn_axis("batch")
        .dyn_axis("seq")
        .build()
        .unwrap()
        .view();
    let err = build_err(&RopeViews {
        x: &x,
        y: &y,
        positions: &floats,
        cos: &c4,
        sin: &c4,
    });
    assert!(
        matches!(&err, OpError::Unsupported { role: "positions", why, .. } if why.contains("u32")),
        "{err}"
    );
    let halves = static_2d("cos", MAX_POSITIONS, 4, ElemType::F16, Order::RowMajor);
    let err = build_err(&RopeViews {
        x: &x,
        y: &y,
        positions: &p,
        cos: &halves,
        sin: &c4,
    });
    assert!(
        matches!(err, OpError::Unsupported { role: "cos", .. }),
        "{err}"
    );
}

#[test]
fn bad_arguments_are_typed_errors() {
    let gpu = gpu();
    let (x, y, p, c, s) = plain(8, 4);
    let op = RopeOp::new(
        gpu,
        &RopeViews {
            x: &x,
            y: &y,
            positions: &p,
            cos: &c,
            sin: &s,
        },
    )
    .unwrap();
    let tokens = [("batch", 2), ("seq", 5)];
    let xb = GpuBuffer::zeroed::<f32>(gpu, 2 * 5 * 2 * 8).unwrap();
    let yb = GpuBuffer::zeroed::<f32>(gpu, 2 * 5 * 2 * 8).unwrap();
    let pb = GpuBuffer::zeroed::<u32>(gpu, 2 * 6).unwrap();
    let tb = GpuBuffer::zeroed::<f32>(gpu, (MAX_POSITIONS * 4) as usize).unwrap();
    let (xa, ya) = (
        GpuArg::new(&xb, &x, &tokens).unwrap(),
        GpuArg::new(&yb, &y, &tokens).unwrap(),
    );
    // Positions of another sequence length.
    let rope = RopeAngles {
        positions: GpuArg::new(&pb, &p, &[("batch", 2), ("seq", 6)]).unwrap(),
        cos: GpuArg::new(&tb, &c, &[]).unwrap(),
        sin: GpuArg::new(&tb, &s, &[]).unwrap(),
    };
    let mut batch = gpu.batch();
    let err = op.forward(&mut batch, &xa, &rope, &ya).unwrap_err();
    assert!(err.to_string().contains("seq is 5 in `x`"), "{err}");
    let err = op.backward(&mut batch, &ya, &rope, &xa).unwrap_err();
    assert!(err.to_string().contains("seq is 5 in `dx`"), "{err}");
    // An argument through another view than the op was built for.
    let rope = RopeAngles {
        positions: GpuArg::new(&pb, &p, &tokens).unwrap(),
        cos: GpuArg::new(&tb, &c, &[]).unwrap(),
        sin: GpuArg::new(&tb, &s, &[]).unwrap(),
    };
    let other = view4("y", Storage::RTile(4), 2, 8, ElemType::F32);
    let ob = GpuBuffer::zeroed::<f32>(gpu, 2 * 8 * 2 * 8).unwrap();
    let oa = GpuArg::new(&ob, &other, &tokens).unwrap();
    let err = op.forward(&mut batch, &xa, &rope, &oa).unwrap_err();
    assert!(matches!(err, OpError::WrongView { role: "y", .. }), "{err}");
    // A head size bound at run time to an odd value.
    let dynamic = |name: &str| {
        LayoutSpec::new(name)
            .dyn_axis("batch")
            .dyn_axis("seq")
            .axis("heads", 2)
            .dyn_axis("head_dim")
            .build()
            .unwrap()
            .view()
    };
    let (dx, dy) = (dynamic("x"), dynamic("y"));
    let (_, _, _, c3, s3) = plain(6, 3);
    let op = RopeOp::new(
        gpu,
        &RopeViews {
            x: &dx,
            y: &dy,
            positions: &p,
            cos: &c3,
            sin: &s3,
        },
    )
    .unwrap();
    let odd = [("batch", 2), ("seq", 5), ("head_dim", 7)];
    let t3 = GpuBuffer::zeroed::<f32>(gpu, (MAX_POSITIONS * 3) as usize).unwrap();
    let rope = RopeAngles {
        positions: GpuArg::new(&pb, &p, &tokens).unwrap(),
        cos: GpuArg::new(&t3, &c3, &[]).unwrap(),
        sin: GpuArg::new(&t3, &s3, &[]).unwrap(),
    };
    let err = op
        .forward(
            &mut batch,
            &GpuArg::new(&xb, &dx, &odd).unwrap(),
            &rope,
            &GpuArg::new(&yb, &dy, &odd).unwrap(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("head_dim is 7"), "{err}");
    assert!(batch.is_empty(), "nothing was recorded");
}

#[test]
fn bad_cpu_operands_are_typed_errors() {
    let mut rng = Rng::new(7);
    let angles = Angles::random(&mut rng, 8, false, Order::RowMajor);
    // y of other heads than x.
    let x = Tensor::random(
        &mut rng,
        view4("x", Storage::RowMajor, 2, 8, ElemType::F32),
        tokens(),
        -1.0,
        1.0,
    );
    let y3 = view4("y", Storage::RowMajor, 3, 8, ElemType::F32);
    let n = (BATCH * SEQ * 3 * 8) as usize;
    let y = Tensor::new(y3, tokens(), vec![0.0; n]);
    let err = cpu_as::<f64, f64>(false, &x, &angles, &y).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // Tables too narrow for the heads.
    let narrow = Angles::random(&mut rng, 6, false, Order::RowMajor);
    let y = Tensor::new(x.view.clone(), tokens(), vec![0.0; x.values.len()]);
    let err = cpu_as::<f64, f64>(false, &x, &narrow, &y).unwrap_err();
    assert!(err.to_string().contains("`cos` has 3 columns"), "{err}");
}
