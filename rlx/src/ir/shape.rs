//! Shapes and tensor types.

use std::fmt;

use super::dim::{Dim, EvalDimError, Symbol};
use super::dtype::DType;

/// The dims of a tensor, outermost first. A shape of rank 0 is a scalar.
///
/// ```
/// use rlx::ir::{Dim, Shape};
/// let s = Shape::new([Dim::sym("batch"), Dim::from(384)]);
/// assert_eq!(s.rank(), 2);
/// assert_eq!(s.to_string(), "[batch,384]");
/// assert_eq!(Shape::from([2, 3]).numel(), Dim::from(6));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(Vec<Dim>);

impl Shape {
    /// A shape with these dims.
    pub fn new(dims: impl IntoIterator<Item = Dim>) -> Shape {
        Shape(dims.into_iter().collect())
    }

    /// The rank-0 shape of a scalar.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The dims, outermost first.
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// The element count, possibly symbolic.
    pub fn numel(&self) -> Dim {
        Dim::product(&self.0)
    }

    /// The element count if every dim is static.
    pub fn static_numel(&self) -> Option<usize> {
        self.0
            .iter()
            .try_fold(1usize, |acc, d| acc.checked_mul(d.as_static()?))
    }

    /// The dims if every one is static.
    ///
    /// ```
    /// use rlx::ir::{Dim, Shape};
    /// assert_eq!(Shape::from([2usize, 3].as_slice()).static_dims(), Some(vec![2, 3]));
    /// assert_eq!(Shape::new([Dim::sym("n")]).static_dims(), None);
    /// ```
    pub fn static_dims(&self) -> Option<Vec<usize>> {
        self.0.iter().map(Dim::as_static).collect()
    }

    /// True if no dim depends on a symbol.
    pub fn is_static(&self) -> bool {
        self.0.iter().all(Dim::is_static)
    }

    /// Every symbol the shape depends on, in name order, without repeats.
    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out: Vec<Symbol> = self.0.iter().flat_map(Dim::symbols).collect();
        out.sort();
        out.dedup();
        out
    }

    /// The concrete sizes for a binding of the symbols.
    pub fn eval(
        &self,
        value_of: &mut dyn FnMut(&Symbol) -> Option<usize>,
    ) -> Result<Vec<usize>, EvalDimError> {
        self.0.iter().map(|d| d.eval(value_of)).collect()
    }
}

impl std::ops::Index<usize> for Shape {
    type Output = Dim;
    fn index(&self, axis: usize) -> &Dim {
        &self.0[axis]
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(dims: [usize; N]) -> Shape {
        Shape(dims.into_iter().map(Dim::Static).collect())
    }
}

impl<const N: usize> From<[Dim; N]> for Shape {
    fn from(dims: [Dim; N]) -> Shape {
        Shape(dims.into())
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(dims: Vec<Dim>) -> Shape {
        Shape(dims)
    }
}

impl From<&[Dim]> for Shape {
    fn from(dims: &[Dim]) -> Shape {
        Shape(dims.to_vec())
    }
}

impl From<&[usize]> for Shape {
    fn from(dims: &[usize]) -> Shape {
        Shape(dims.iter().copied().map(Dim::Static).collect())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What a node produces: an element type and a shape. Printed as `f32[batch,1536]`.
///
/// ```
/// use rlx::ir::{DType, TensorType};
/// let t = TensorType::new(DType::F16, [2, 3]);
/// assert_eq!(t.to_string(), "f16[2,3]");
/// assert_eq!(t.static_bytes(), Some(12));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dims.
    pub shape: Shape,
}

impl TensorType {
    /// A tensor type from a dtype and anything that converts into a [`Shape`].
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    /// Rank of the shape.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Bytes of the tensor when its shape is static.
    pub fn static_bytes(&self) -> Option<usize> {
        self.shape
            .static_numel()?
            .checked_mul(self.dtype.size_bytes())
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

impl fmt::Debug for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
