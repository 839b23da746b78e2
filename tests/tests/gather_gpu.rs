//! The gather kernel materialises views on the GPU exactly as the CPU path reads them.

use fblayout_kernels::{Gather, GpuBuffer, GpuError};
use fblayout_tests::catalog::canonical_views;
use fblayout_tests::test_gpu;

#[test]
fn gathers_every_canonical_view() {
    let gpu = test_gpu();
    for canonical in canonical_views().unwrap() {
        let view = &canonical.view;
        let tensor = view.layout().bind(&canonical.bind).unwrap();
        let data: Vec<u32> = (1..=tensor.logical_len() as u32).collect();
        let physical = tensor.pack(&data).unwrap();
        let bound = view.bind(&canonical.bind).unwrap();
        let gather = Gather::new(view, &bound).unwrap();
        let src = GpuBuffer::from_slice(gpu, &physical).unwrap();
        let dst = GpuBuffer::zeroed::<u32>(gpu, bound.logical_len() as usize).unwrap();
        gather.run(gpu, &src, &dst).unwrap();
        let got: Vec<u32> = dst.read_back().unwrap();
        assert_eq!(got, bound.unpack(&physical).unwrap(), "{}", view.name());
    }
}

#[test]
fn mismatched_buffers_are_errors() {
    let gpu = test_gpu();
    let view = canonical_views().unwrap().remove(4).view; // rtile4
    let bound = view.bind(&[]).unwrap();
    let gather = Gather::new(&view, &bound).unwrap();
    let small = GpuBuffer::zeroed::<u32>(gpu, 8).unwrap();
    let full = GpuBuffer::zeroed::<u32>(gpu, bound.len() as usize).unwrap();
    assert!(matches!(
        gather.run(gpu, &small, &full),
        Err(GpuError::BadInput { .. })
    ));
    assert!(matches!(
        gather.run(gpu, &full, &small),
        Err(GpuError::BadInput { .. })
    ));
}
