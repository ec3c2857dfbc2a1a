//! The thunk of seeded uniform draws.

use super::{Lower, LowerInput, boxed};
use crate::backend::RunError;
use crate::cpu::thunk::{Accesses, Kernel, Thunk};
use crate::cpu::view::{Memory, View};
use crate::ir;
use crate::ops::{random_key, uniform_at};

/// `out[i]` = element `i` of the draw of the seed and `stream` (see [`ir::RandomUniform`]).
#[derive(Clone, Debug)]
pub(crate) struct RandomUniform {
    pub stream: u32,
    pub seed: View,
    pub out: View,
}

impl Kernel for RandomUniform {
    fn accesses(&self) -> Accesses {
        Accesses {
            writes: vec![(self.out, 4)],
            reads: vec![(self.seed, 8)],
        }
    }

    fn execute(&self, mem: &Memory) -> Result<(), RunError> {
        let key = random_key(mem.src::<i64>(self.seed)[0], self.stream);
        // Chunks large enough to be worth a worker; each draw is a few integer ops.
        const CHUNK: usize = 4096;
        let out = mem.dst::<f32>(self.out);
        crate::cpu::workers::chunks_mut(out, CHUNK, |chunk, values| {
            for (j, v) in values.iter_mut().enumerate() {
                *v = uniform_at(key, chunk * CHUNK + j);
            }
        });
        Ok(())
    }
}

impl Lower for ir::RandomUniform {
    fn lower(&self, n: &LowerInput<'_>) -> Vec<Thunk> {
        vec![boxed(RandomUniform {
            stream: self.stream,
            seed: n.views[0],
            out: n.out,
        })]
    }
}
