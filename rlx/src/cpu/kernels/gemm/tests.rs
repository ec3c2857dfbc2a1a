//! The GEMM driver and every micro-kernel against a float64 product.

use super::*;

fn naive(d: &GemmDims, a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut c = vec![0.0; d.m * d.n];
    for i in 0..d.m {
        for j in 0..d.n {
            for p in 0..d.k {
                c[i * d.n + j] += a[i * d.a_rs + p * d.a_cs] * b[p * d.b_rs + j * d.b_cs];
            }
        }
    }
    c
}

fn check(m: usize, n: usize, k: usize, ta: bool, tb: bool, threads: usize) {
    let d = GemmDims {
        m,
        n,
        k,
        a_rs: if ta { 1 } else { k },
        a_cs: if ta { m } else { 1 },
        b_rs: if tb { 1 } else { n },
        b_cs: if tb { k } else { 1 },
    };
    let a: Vec<f64> = (0..m * k).map(|i| ((i * 7 % 13) as f64) - 6.0).collect();
    let b: Vec<f64> = (0..k * n)
        .map(|i| ((i * 5 % 11) as f64) * 0.5 - 2.0)
        .collect();
    let expected = naive(&d, &a, &b);
    let a32: Vec<f32> = a.iter().map(|v| *v as f32).collect();
    let b32: Vec<f32> = b.iter().map(|v| *v as f32).collect();
    // Every f32 kernel family this CPU can run, each with its own plan and packing, and
    // each kernel of a family (the plan picks the tall one for few rows).
    let families = [
        Some(scalar::kernels::<f32>()),
        avx2::f32_kernels(),
        avx512::f32_kernels(),
    ];
    for kernels in families.into_iter().flatten() {
        let plan = GemmPlan::new(d, threads, kernels.shape);
        let mut scratch = vec![0f32; plan.scratch_len()];
        let mut packed = vec![f32::NAN; packed_b_len(k, n, kernels.shape)];
        pack_b_whole(&d, &b32, kernels.shape, &mut packed);
        for prepacked in [None, Some(packed.as_slice())] {
            let mut c = vec![f32::NAN; m * n];
            // The product, then the same product added to what C holds.
            for (run, times) in [(plan, 1.0), (plan.adding(), 2.0)] {
                gemm(
                    &run,
                    kernels,
                    &a32,
                    &b32,
                    &mut c,
                    &mut scratch,
                    prepacked,
                    None,
                );
                for (x, y) in c.iter().zip(&expected) {
                    assert!(
                        (f64::from(*x) - times * y).abs() < times * 1e-3 * (1.0 + y.abs()),
                        "{m}x{n}x{k} nr {} mr {} {x} vs {times} * {y}",
                        kernels.shape.nr,
                        plan.mr
                    );
                }
            }
        }
    }
    let kernels = f64::micro_kernels();
    let plan = GemmPlan::new(d, threads, kernels.shape);
    let mut scratch = vec![0f64; plan.scratch_len()];
    let mut packed = vec![f64::NAN; packed_b_len(k, n, kernels.shape)];
    pack_b_whole(&d, &b, kernels.shape, &mut packed);
    for prepacked in [None, Some(packed.as_slice())] {
        let mut c = vec![f64::NAN; m * n];
        gemm(
            &plan,
            kernels,
            &a,
            &b,
            &mut c,
            &mut scratch,
            prepacked,
            None,
        );
        assert_eq!(c, expected, "prepacked B: {}", prepacked.is_some());
    }
}

#[test]
fn matches_naive_on_edges_and_blocks() {
    for &(m, n, k) in &[
        (1, 1, 1),
        // Tiles of 1 to 4 rows, which compute only those rows.
        (1, 100, 577),
        (2, 35, 200),
        (3, 40, 7),
        (4, 33, 390),
        (6, 16, 3),
        (7, 17, 5),
        (13, 33, 300),
        (121, 40, 513),
        (250, 3100, 20),
        (9, 40, 200),
        (14, 33, 193),
        (16, 70, 400),
        (32, 64, 200),
        (45, 33, 385),
        // Rows split between two workers that share one packing of B, over 3 blocks of k.
        (300, 70, 400),
        (3, 5, 0),
    ] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            check(m, n, k, ta, tb, 2);
        }
    }
    check(130, 70, 40, false, true, 1);
}

#[test]
fn tall_kernels_take_few_rows_only() {
    let shape = KernelShape {
        nr: 32,
        kc: 192,
        mr: 6,
        tall_mr: Some(16),
    };
    // 16 rows: one pass of the tall kernel against three of the regular one.
    assert_eq!(shape.rows_per_call(16), 16);
    assert_eq!(shape.rows_per_call(13), 16);
    assert_eq!(shape.rows_per_call(32), 16);
    // Fewer padding rows with the regular kernel, or many rows: the regular one.
    assert_eq!(shape.rows_per_call(6), 6);
    assert_eq!(shape.rows_per_call(9), 6);
    assert_eq!(shape.rows_per_call(17), 6);
    assert_eq!(shape.rows_per_call(512), 6);
    let no_tall = KernelShape {
        tall_mr: None,
        ..shape
    };
    assert_eq!(no_tall.rows_per_call(16), 6);
}

/// Unpacking a whole-B packing gives B back, value for value, for every kernel family's
/// panel width, both layouts, ragged panels and several K blocks; f16 through its f32
/// accumulator too.
#[test]
fn unpacking_inverts_packing() {
    let families = [
        Some(scalar::kernels::<f32>().shape),
        avx2::f32_kernels().map(|k| k.shape),
        avx512::f32_kernels().map(|k| k.shape),
    ];
    for shape in families.into_iter().flatten() {
        for (k, n) in [
            (1, 1),
            (5, 3),
            (shape.kc + 3, 2 * shape.nr + 5),
            (2 * shape.kc, 37),
        ] {
            for tb in [false, true] {
                let d = GemmDims {
                    m: 0,
                    n,
                    k,
                    a_rs: 0,
                    a_cs: 0,
                    b_rs: if tb { 1 } else { n },
                    b_cs: if tb { k } else { 1 },
                };
                let b: Vec<f32> = (0..k * n).map(|i| (i as f32).sin() * 3.0).collect();
                let mut packed = vec![f32::NAN; packed_b_len(k, n, shape)];
                pack_b_whole(&d, &b, shape, &mut packed);
                let mut back = vec![f32::NAN; k * n];
                unpack_b_whole(&d, &packed, shape, &mut back);
                assert_eq!(
                    back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    "{k}x{n} nr {} transposed {tb}",
                    shape.nr
                );
                let h: Vec<half::f16> = b.iter().map(|x| half::f16::from_f32(*x)).collect();
                pack_b_whole(&d, &h, shape, &mut packed);
                let mut back = vec![half::f16::NAN; k * n];
                unpack_b_whole(&d, &packed, shape, &mut back);
                assert_eq!(
                    back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    h.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                );
            }
        }
    }
}
