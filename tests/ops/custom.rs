//! Custom ops: kernels registered per backend, their failures reported.

use std::collections::BTreeMap;
use std::sync::Arc;

use rlx::backend::{Backend, Executable};
use rlx::cpu::{CpuBackend, CustomInputs, CustomKernel, TensorMut};
use rlx::ir::{AttrValue, Custom, DType, Op, TensorType};
use rlx::tensor::HostTensor;

use crate::harness::{declared, graph_of};

/// `y = x + attrs["shift"]` for f32, failing on a negative shift.
struct Shift;

impl CustomKernel for Shift {
    fn compute(
        &self,
        attrs: &BTreeMap<String, AttrValue>,
        inputs: &CustomInputs<'_>,
        out: TensorMut<'_>,
    ) -> Result<(), String> {
        let Some(AttrValue::Float(shift)) = attrs.get("shift") else {
            return Err("missing attribute `shift`".into());
        };
        if *shift < 0.0 {
            return Err(format!("shift {shift} is negative"));
        }
        let x = inputs.get(0).ok_or("needs an operand")?;
        for (o, i) in out.bytes.chunks_exact_mut(4).zip(x.bytes.chunks_exact(4)) {
            let v = f32::from_le_bytes(i.try_into().map_err(|_| "bad bytes")?) + *shift as f32;
            o.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
}

#[test]
fn custom_ops_run_registered_kernels_and_report_failures() {
    for (shift, expect_ok) in [(1.5, true), (-1.0, false)] {
        let attrs = BTreeMap::from([("shift".to_string(), AttrValue::Float(shift))]);
        let op = Op::Custom(Custom {
            name: "shift".into(),
            attrs,
            output: TensorType::new(DType::F32, declared(&[2, 2], &[(0, "n")])),
        });
        let g = graph_of(
            &[("x", DType::F32, declared(&[2, 2], &[(0, "n")]))],
            |b, i| {
                let y = b.op(op.clone(), i).unwrap();
                b.unary(rlx::ir::UnaryOp::Neg, y).unwrap()
            },
        );
        let backend = CpuBackend::default().with_custom_op("shift", Arc::new(Shift));
        let exe = backend.compile(&g).unwrap();
        let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
        let result = exe.run(&[("x", x.view())], &[]);
        if expect_ok {
            assert_eq!(
                result.unwrap()[0].as_slice::<f32>().unwrap(),
                &[-2.5, -3.5, -4.5, -5.5]
            );
        } else {
            assert_eq!(
                result.unwrap_err().to_string(),
                "custom op \"shift\" failed: shift -1 is negative"
            );
        }
    }
}
