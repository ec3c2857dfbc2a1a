//! Dimensions: static sizes, named symbols and polynomial expressions over symbols.
//!
//! A symbol (`batch`, `seq`) is a size known only when a graph runs. Ops that do arithmetic
//! on sizes (flattening `[batch, seq, 384]` to `[batch*seq, 384]`, concatenating two `seq`
//! axes, padding) produce polynomials over symbols with integer coefficients. Every `Dim` is
//! kept in one canonical form, so two dims are provably equal exactly when they compare
//! equal with `==`; anything else is rejected by shape inference rather than guessed.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A named runtime dimension such as `batch` or `seq`.
///
/// ```
/// use rlx::ir::Symbol;
/// let s = Symbol::new("seq");
/// assert_eq!(s.name(), "seq");
/// assert_eq!(s, Symbol::new("seq"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Symbol(Arc<str>);

impl Symbol {
    /// A symbol with this name. Symbols with equal names are the same dimension.
    pub fn new(name: &str) -> Self {
        Symbol(Arc::from(name))
    }

    /// The symbol's name as written in shapes and errors.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A product of symbols, kept sorted (`batch*seq*seq`). The empty product is the constant 1.
type Monomial = Vec<Symbol>;

/// A polynomial over symbols with integer coefficients, in canonical form: no zero
/// coefficients, monomials sorted and unique.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DimExpr {
    terms: BTreeMap<Monomial, i64>,
}

impl DimExpr {
    fn constant(c: i64) -> Self {
        let mut terms = BTreeMap::new();
        if c != 0 {
            terms.insert(Vec::new(), c);
        }
        DimExpr { terms }
    }

    fn symbol(s: &Symbol) -> Self {
        DimExpr {
            terms: BTreeMap::from([(vec![s.clone()], 1)]),
        }
    }

    fn add_term(&mut self, mono: Monomial, coef: i64) {
        let entry = self.terms.entry(mono).or_insert(0);
        *entry += coef;
        if *entry == 0 {
            self.terms.retain(|_, c| *c != 0);
        }
    }

    fn add(&self, rhs: &DimExpr, sign: i64) -> DimExpr {
        let mut out = self.clone();
        for (m, c) in &rhs.terms {
            out.add_term(m.clone(), sign * c);
        }
        out
    }

    fn mul(&self, rhs: &DimExpr) -> DimExpr {
        let mut out = DimExpr::constant(0);
        for (ma, ca) in &self.terms {
            for (mb, cb) in &rhs.terms {
                let mut m: Monomial = ma.iter().chain(mb).cloned().collect();
                m.sort();
                out.add_term(m, ca * cb);
            }
        }
        out
    }

    /// The leading term under graded order: highest degree first, ties broken by the
    /// monomial order. Any fixed monomial order works for exact division.
    fn leading(&self) -> Option<(&Monomial, i64)> {
        self.terms
            .iter()
            .max_by(|(a, _), (b, _)| a.len().cmp(&b.len()).then_with(|| b.cmp(a)))
            .map(|(m, c)| (m, *c))
    }

    /// `self / rhs` when the division is exact over integer polynomials.
    fn div_exact(&self, rhs: &DimExpr) -> Option<DimExpr> {
        let (lead_d, coef_d) = rhs.leading()?;
        let mut rest = self.clone();
        let mut quotient = DimExpr::constant(0);
        while let Some((lead_r, coef_r)) = rest.leading() {
            if coef_r % coef_d != 0 {
                return None;
            }
            let mono = monomial_div(lead_r, lead_d)?;
            let step = DimExpr {
                terms: BTreeMap::from([(mono, coef_r / coef_d)]),
            };
            rest = rest.add(&step.mul(rhs), -1);
            quotient = quotient.add(&step, 1);
        }
        // Long division by one polynomial finds the quotient whenever it exists; the check
        // guards the monomial-order reasoning above.
        (quotient.mul(rhs) == *self).then_some(quotient)
    }

    fn eval(&self, value_of: &mut dyn FnMut(&Symbol) -> Option<usize>) -> Result<i64, Symbol> {
        let mut total: i64 = 0;
        for (mono, coef) in &self.terms {
            let mut term = *coef;
            for s in mono {
                let v = value_of(s).ok_or_else(|| s.clone())?;
                term = term.saturating_mul(i64::try_from(v).unwrap_or(i64::MAX));
            }
            total = total.saturating_add(term);
        }
        Ok(total)
    }
}

/// Removes the symbols of `divisor` from `mono`, if `mono` contains all of them.
fn monomial_div(mono: &Monomial, divisor: &Monomial) -> Option<Monomial> {
    let mut rest = mono.clone();
    for s in divisor {
        let at = rest.iter().position(|r| r == s)?;
        rest.remove(at);
    }
    Some(rest)
}

impl fmt::Display for DimExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ordered: Vec<_> = self.terms.iter().collect();
        ordered.sort_by(|(a, _), (b, _)| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        if ordered.is_empty() {
            return f.write_str("0");
        }
        for (i, (mono, coef)) in ordered.into_iter().enumerate() {
            let magnitude = coef.unsigned_abs();
            match (i, *coef < 0) {
                (0, true) => f.write_str("-")?,
                (0, false) => {}
                (_, true) => f.write_str("-")?,
                (_, false) => f.write_str("+")?,
            }
            if mono.is_empty() {
                write!(f, "{magnitude}")?;
                continue;
            }
            if magnitude != 1 {
                write!(f, "{magnitude}*")?;
            }
            for (j, s) in mono.iter().enumerate() {
                if j > 0 {
                    f.write_str("*")?;
                }
                write!(f, "{s}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for DimExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One dimension of a shape.
///
/// `Static` and `Sym` cover almost every dim; `Expr` holds the rest (`batch*seq`, `seq+2`).
/// Arithmetic keeps the form canonical: a constant expression is always `Static`, a lone
/// symbol always `Sym`, so `==` is equality of sizes for every binding of the symbols.
///
/// ```
/// use rlx::ir::Dim;
/// let seq = Dim::sym("seq");
/// let two_seq = seq.checked_add(&seq).unwrap();
/// assert_eq!(two_seq.to_string(), "2*seq");
/// assert_eq!(two_seq.checked_sub(&seq), Some(seq.clone()));
/// assert_eq!(Dim::from(3).mul(&Dim::from(4)), Dim::Static(12));
/// assert_eq!(Dim::sym("batch").mul(&seq).to_string(), "batch*seq");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A size known when the graph is built.
    Static(usize),
    /// A named size bound when the graph runs.
    Sym(Symbol),
    /// A polynomial over symbols that is neither a constant nor a lone symbol.
    Expr(Arc<DimExpr>),
}

impl Dim {
    /// A dim that is the named symbol `name`.
    pub fn sym(name: &str) -> Dim {
        Dim::Sym(Symbol::new(name))
    }

    /// The size, if it is known when the graph is built.
    pub fn as_static(&self) -> Option<usize> {
        match self {
            Dim::Static(n) => Some(*n),
            _ => None,
        }
    }

    /// True for `Static(1)`: the only dim that broadcasts.
    pub fn is_one(&self) -> bool {
        matches!(self, Dim::Static(1))
    }

    /// True if the size depends on no symbol.
    pub fn is_static(&self) -> bool {
        matches!(self, Dim::Static(_))
    }

    fn to_expr(&self) -> DimExpr {
        match self {
            Dim::Static(n) => DimExpr::constant(*n as i64),
            Dim::Sym(s) => DimExpr::symbol(s),
            Dim::Expr(e) => (**e).clone(),
        }
    }

    /// Canonicalizes an expression. `None` if it is a negative constant, which no dim can be.
    fn from_expr(e: DimExpr) -> Option<Dim> {
        if e.terms.is_empty() {
            return Some(Dim::Static(0));
        }
        if e.terms.len() == 1 {
            let (mono, coef) = e.terms.iter().next()?;
            if mono.is_empty() {
                return usize::try_from(*coef).ok().map(Dim::Static);
            }
            if mono.len() == 1 && *coef == 1 {
                return Some(Dim::Sym(mono[0].clone()));
            }
        }
        Some(Dim::Expr(Arc::new(e)))
    }

    /// `self + rhs`, or `None` when symbolic terms cancel to a negative constant
    /// (possible only with dims that are themselves differences, such as `seq-4`).
    pub fn checked_add(&self, rhs: &Dim) -> Option<Dim> {
        match (self, rhs) {
            (Dim::Static(a), Dim::Static(b)) => a.checked_add(*b).map(Dim::Static),
            _ => Dim::from_expr(self.to_expr().add(&rhs.to_expr(), 1)),
        }
    }

    /// `self * rhs`.
    pub fn mul(&self, rhs: &Dim) -> Dim {
        match (self, rhs) {
            (Dim::Static(a), Dim::Static(b)) => Dim::Static(a.saturating_mul(*b)),
            // Integer polynomials have no zero divisors, so a product of two dims is a
            // constant only when both factors are constants, and those are non-negative.
            _ => Dim::from_expr(self.to_expr().mul(&rhs.to_expr())).unwrap_or(Dim::Static(0)),
        }
    }

    /// `self - rhs`, or `None` when the result is provably negative (a negative constant).
    ///
    /// A symbolic difference such as `seq-1` is accepted here; its value is checked to be
    /// non-negative when the symbols are bound.
    pub fn checked_sub(&self, rhs: &Dim) -> Option<Dim> {
        match (self, rhs) {
            (Dim::Static(a), Dim::Static(b)) => a.checked_sub(*b).map(Dim::Static),
            _ => Dim::from_expr(self.to_expr().add(&rhs.to_expr(), -1)),
        }
    }

    /// `self / rhs` when the quotient is a dim for every binding of the symbols
    /// (`batch*seq / seq = batch`, `12 / 4 = 3`); `None` otherwise.
    pub fn div_exact(&self, rhs: &Dim) -> Option<Dim> {
        match (self, rhs) {
            (_, Dim::Static(0)) => None,
            (Dim::Static(a), Dim::Static(b)) => (a % b == 0).then(|| Dim::Static(a / b)),
            _ => Dim::from_expr(self.to_expr().div_exact(&rhs.to_expr())?),
        }
    }

    /// The product of `dims`: the element count of a shape.
    pub fn product<'a>(dims: impl IntoIterator<Item = &'a Dim>) -> Dim {
        dims.into_iter().fold(Dim::Static(1), |acc, d| acc.mul(d))
    }

    /// The symbols this dim depends on, in name order, without repeats.
    pub fn symbols(&self) -> Vec<Symbol> {
        let mut out: Vec<Symbol> = match self {
            Dim::Static(_) => Vec::new(),
            Dim::Sym(s) => vec![s.clone()],
            Dim::Expr(e) => e.terms.keys().flatten().cloned().collect(),
        };
        out.sort();
        out.dedup();
        out
    }

    /// The size for a binding of the symbols.
    ///
    /// Fails with the first unbound symbol, or with the value when it is negative (e.g.
    /// `seq-4` with `seq = 2`).
    ///
    /// ```
    /// use rlx::ir::{Dim, EvalDimError};
    /// let d = Dim::sym("seq").checked_sub(&Dim::from(4)).unwrap();
    /// let bind = |v: usize| move |_: &rlx::ir::Symbol| Some(v);
    /// assert_eq!(d.eval(&mut bind(10)), Ok(6));
    /// assert_eq!(d.eval(&mut bind(2)), Err(EvalDimError::Negative(-2)));
    /// ```
    pub fn eval(
        &self,
        value_of: &mut dyn FnMut(&Symbol) -> Option<usize>,
    ) -> Result<usize, EvalDimError> {
        match self {
            Dim::Static(n) => Ok(*n),
            Dim::Sym(s) => value_of(s).ok_or_else(|| EvalDimError::Unbound(s.clone())),
            Dim::Expr(e) => {
                let v = e.eval(value_of).map_err(EvalDimError::Unbound)?;
                usize::try_from(v).map_err(|_| EvalDimError::Negative(v))
            }
        }
    }
}

/// Why a dim has no size under a binding of its symbols.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalDimError {
    /// A symbol the dim depends on has no value.
    #[error("dimension `{0}` is not bound")]
    Unbound(Symbol),
    /// The dim evaluates to a negative size.
    #[error("dimension evaluates to a negative size ({0})")]
    Negative(i64),
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Static(n)
    }
}

impl From<Symbol> for Dim {
    fn from(s: Symbol) -> Dim {
        Dim::Sym(s)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Sym(s) => write!(f, "{s}"),
            Dim::Expr(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str) -> Dim {
        Dim::sym(name)
    }

    fn add(a: &Dim, b: &Dim) -> Dim {
        a.checked_add(b).unwrap()
    }

    #[test]
    fn arithmetic_is_canonical() {
        let (b, q) = (s("batch"), s("seq"));
        assert_eq!(b.mul(&q), q.mul(&b));
        assert_eq!(
            add(&q, &Dim::from(2)).checked_sub(&Dim::from(2)),
            Some(q.clone())
        );
        assert_eq!(add(&q, &q).div_exact(&Dim::from(2)), Some(q.clone()));
        assert_eq!(b.mul(&q).div_exact(&q), Some(b.clone()));
        assert_eq!(q.checked_sub(&q), Some(Dim::Static(0)));
        assert_eq!(b.mul(&Dim::from(1)), b);
        assert_eq!(Dim::from(0).mul(&b), Dim::Static(0));
    }

    #[test]
    fn polynomial_division() {
        let (b, q) = (s("batch"), s("seq"));
        // (b + 1) * (q + 2) / (q + 2) = b + 1
        let b1 = add(&b, &Dim::from(1));
        let q2 = add(&q, &Dim::from(2));
        assert_eq!(b1.mul(&q2).div_exact(&q2), Some(b1.clone()));
        assert_eq!(b1.mul(&q2).div_exact(&b1), Some(q2.clone()));
        assert_eq!(add(&q, &Dim::from(1)).div_exact(&Dim::from(2)), None);
        assert_eq!(q.div_exact(&b), None);
        assert_eq!(q.mul(&Dim::from(6)).div_exact(&Dim::from(4)), None);
        assert_eq!(Dim::from(7).div_exact(&Dim::from(0)), None);
    }

    #[test]
    fn display() {
        let (b, q) = (s("batch"), s("seq"));
        assert_eq!(add(&q, &Dim::from(2)).to_string(), "seq+2");
        assert_eq!(q.checked_sub(&Dim::from(1)).unwrap().to_string(), "seq-1");
        assert_eq!(
            add(&q.mul(&q), &b.mul(&Dim::from(3))).to_string(),
            "seq*seq+3*batch"
        );
        assert_eq!(Dim::from(1).checked_sub(&q).unwrap().to_string(), "-seq+1");
    }

    #[test]
    fn subtraction_rejects_negative_constants_only() {
        assert_eq!(Dim::from(2).checked_sub(&Dim::from(3)), None);
        assert!(s("seq").checked_sub(&Dim::from(3)).is_some());
        assert_eq!(s("seq").checked_sub(&add(&s("seq"), &Dim::from(1))), None);
        // Differences can cancel to a negative constant when added.
        let one_minus_seq = Dim::from(1).checked_sub(&s("seq")).unwrap();
        let seq_minus_4 = s("seq").checked_sub(&Dim::from(4)).unwrap();
        assert_eq!(one_minus_seq.checked_add(&seq_minus_4), None);
    }

    #[test]
    fn eval_binds_symbols() {
        let d = add(&s("batch").mul(&s("seq")), &Dim::from(1));
        let mut vals = |x: &Symbol| match x.name() {
            "batch" => Some(4),
            "seq" => Some(5),
            _ => None,
        };
        assert_eq!(d.eval(&mut vals), Ok(21));
        assert_eq!(
            s("other").eval(&mut vals),
            Err(EvalDimError::Unbound(Symbol::new("other")))
        );
        assert_eq!(d.symbols(), vec![Symbol::new("batch"), Symbol::new("seq")]);
    }
}
