//! The vector instruction set kernels run with, chosen once per process at run time.
//!
//! The crate is compiled for baseline x86-64 (SSE2), so it runs on every x86-64 CPU. Loops
//! that the compiler vectorizes reach the wider units through [`vectorized`], which runs a
//! closure inlined into a function compiled with AVX2+FMA or AVX-512 enabled. Elementwise
//! results do not depend on the choice: the same IEEE operations run at another width, and
//! `a * b + c` is never contracted into a fused multiply-add.
//!
//! Three rules keep a loop vectorizable: no reduction through one running sum (keep one
//! per lane), no captured value read through a pointer that may alias the output, and in
//! fixed-width loops every load before any store.
//!
//! `RLX_CPU_ISA=baseline|avx2|avx512` caps the choice (never above what the CPU has), so
//! the narrower paths can be tested on a wide machine.

use std::sync::OnceLock;

/// Vector instruction sets the kernels are built for, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// SSE2, which every x86-64 CPU (and any other architecture's baseline) has.
    Baseline,
    /// AVX2 with FMA: 256-bit vectors.
    Avx2,
    /// AVX-512 F/BW/DQ/VL: 512-bit vectors.
    Avx512,
}

impl Isa {
    /// The name `RLX_CPU_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Baseline => "baseline",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    fn parse(name: &str) -> Option<Isa> {
        [Isa::Baseline, Isa::Avx2, Isa::Avx512]
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name.trim()))
    }
}

/// Whether the CPU's vendor is Intel (`cpuid` leaf 0 reads "GenuineIntel"), for the tuning
/// choices that differ by vendor rather than by instruction set.
#[cfg(target_arch = "x86_64")]
pub(crate) fn intel_cpu() -> bool {
    let id = std::arch::x86_64::__cpuid(0);
    // The vendor string's twelve bytes lie in EBX, EDX, ECX, in that order.
    let vendor = [id.ebx, id.edx, id.ecx].map(u32::to_le_bytes);
    vendor.concat() == b"GenuineIntel"
}

/// The widest instruction set this CPU has.
pub fn detected_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        let avx512 = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl");
        if avx2 && avx512 {
            return Isa::Avx512;
        }
        if avx2 {
            return Isa::Avx2;
        }
    }
    Isa::Baseline
}

/// The instruction set the CPU kernels use in this process: the CPU's widest, capped by
/// `RLX_CPU_ISA` when set (an unknown value is ignored).
///
/// ```
/// use rlx::cpu::{Isa, detected_isa, isa};
/// assert!(isa() <= detected_isa());
/// assert!(isa() >= Isa::Baseline);
/// ```
pub fn isa() -> Isa {
    static CHOSEN: OnceLock<Isa> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let best = detected_isa();
        std::env::var("RLX_CPU_ISA")
            .ok()
            .and_then(|v| Isa::parse(&v))
            .map_or(best, |cap| cap.min(best))
    })
}

/// A loop nest to compile once per instruction set (see [`vectorized`]).
///
/// Closures implement it; a kernel too large for the compiler to inline on its own
/// implements it on a struct of its arguments, with `run` marked `#[inline(always)]`, which
/// guarantees it is compiled inside each instruction set's copy.
pub(crate) trait VectorKernel {
    type Output;
    fn run(self) -> Self::Output;
}

impl<R, F: FnOnce() -> R> VectorKernel for F {
    type Output = R;
    #[inline(always)]
    fn run(self) -> R {
        self()
    }
}

/// Runs `kernel` compiled for [`isa`]: it is inlined into a function with that instruction
/// set enabled, so its loops vectorize at that width.
#[inline(always)]
pub(crate) fn vectorized<K: VectorKernel>(kernel: K) -> K::Output {
    match isa() {
        // SAFETY: `isa` returns Avx512 only when the CPU has AVX-512 F/BW/DQ/VL, AVX2 and FMA.
        Isa::Avx512 => unsafe { with_avx512(kernel) },
        // SAFETY: `isa` returns Avx2 only when the CPU has AVX2 and FMA.
        Isa::Avx2 => unsafe { with_avx2(kernel) },
        Isa::Baseline => kernel.run(),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn with_avx2<K: VectorKernel>(kernel: K) -> K::Output {
    kernel.run()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")]
unsafe fn with_avx512<K: VectorKernel>(kernel: K) -> K::Output {
    kernel.run()
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn with_avx2<K: VectorKernel>(kernel: K) -> K::Output {
    kernel.run()
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn with_avx512<K: VectorKernel>(kernel: K) -> K::Output {
    kernel.run()
}
