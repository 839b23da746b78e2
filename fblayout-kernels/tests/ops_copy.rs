//! Copies between layouts: against their definition on the CPU, and the GPU against it, under
//! every pair of 2-D layouts and every element type.

mod support;

use fblayout_kernels::ops::CopyOp;
use fblayout_kernels::ops::copy::copy_cpu;
use support::{Layout2, Rng, Tensor, assert_close, gpu, gpu_elems, view_2d};

#[test]
fn copies_keep_every_value_whatever_the_two_layouts() {
    let gpu = gpu();
    let mut rng = Rng::new(5);
    for elem in gpu_elems() {
        for (i, xl) in Layout2::ALL.into_iter().enumerate() {
            let yl = Layout2::ALL[(i + 3) % Layout2::ALL.len()];
            let (xv, bind) = view_2d("x", xl, 13, 36, elem);
            let (yv, _) = view_2d("y", yl, 13, 36, elem);
            let x = Tensor::random(&mut rng, xv, bind.clone(), -2.0, 2.0);
            let y = Tensor::new(yv, bind, vec![0.0; x.values.len()]);
            let xh = x.host::<f64>();
            let mut yh = y.host::<f64>();
            copy_cpu(&x.arg(&xh), &mut y.arg_mut(&mut yh)).unwrap();
            assert_close(
                &format!("cpu {xl:?}→{yl:?}"),
                &y.read_host(&yh),
                &x.values,
                0.0,
            );

            let op = CopyOp::new(gpu, &x.view, &y.view).unwrap();
            let (xb, yb) = (x.upload(gpu), y.poisoned(gpu));
            let mut batch = gpu.batch();
            op.forward(&mut batch, &x.gpu_arg(&xb), &y.gpu_arg(&yb))
                .unwrap();
            batch.submit().unwrap();
            // The values as stored (f16 rounds them), moved exactly.
            let stored = x.download(&xb);
            assert_close(
                &format!("gpu {elem} {xl:?}→{yl:?}"),
                &y.download(&yb),
                &stored,
                0.0,
            );
        }
    }
    // Operands of different shapes are a typed error.
    let (av, bind) = view_2d("a", Layout2::ALL[0], 4, 8, gpu_elems()[0]);
    let (bv, bbind) = view_2d("b", Layout2::ALL[0], 8, 4, gpu_elems()[0]);
    let a = Tensor::random(&mut rng, av, bind, -1.0, 1.0);
    let b = Tensor::random(&mut rng, bv, bbind, -1.0, 1.0);
    let ah = a.host::<f64>();
    let mut bh = b.host::<f64>();
    let err = copy_cpu(&a.arg(&ah), &mut b.arg_mut(&mut bh)).unwrap_err();
    assert!(err.to_string().contains("copy"), "{err}");
}
