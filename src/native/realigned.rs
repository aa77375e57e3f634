//! Frames that realign their stack (gcc's "DRAP": AVX code such as
//! numpy's SIMD sorts), whose call frame address is not a register plus an
//! offset but a DWARF expression: `CFA = *(rbp + N)`. framehop does not
//! evaluate CFA expressions, so such a frame's rule is read here from the
//! module's `.eh_frame` (with gimli) and applied by the walk.
//!
//! Only that exact expression is understood; any other leaves the frame
//! to framehop, as before.

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};

use super::modules::Bytes;

/// One module's call frame information.
pub struct Cfi {
    pub eh_frame: Bytes,
    pub eh_frame_svma: u64,
    pub eh_frame_hdr: Option<(Bytes, u64)>,
    pub text_svma: Option<u64>,
    pub got_svma: Option<u64>,
}

/// How to unwind one realigned frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Realigned {
    /// CFA = the word at `rbp + cfa_at_bp`.
    pub cfa_at_bp: i64,
    /// The return address is at `CFA + ra_at_cfa`.
    pub ra_at_cfa: i64,
    /// Where the caller's `rbp` is.
    pub bp: SavedBp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedBp {
    /// At `CFA + n`.
    AtCfa(i64),
    /// At `rbp + n` (an expression `DW_OP_breg6 n`).
    AtBp(i64),
    /// Not saved: the same.
    Same,
}

const DW_OP_BREG6: u8 = 0x76;
const DW_OP_DEREF: u8 = 0x06;

/// How the frame at an address is unwound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameRule {
    /// By its unwind table, as framehop reads it.
    Table,
    /// By its realignment rule, here.
    Realigned(Realigned),
    /// No unwind table covers it: only frame pointers can say where its
    /// caller is, if it keeps one.
    NoTable,
}

impl Cfi {
    /// How the frame at `svma` is unwound: by its table, by its
    /// realignment rule, or (no entry covers it) by frame pointers.
    pub fn rule(&self, svma: u64, ctx: &mut UnwindContext<usize>) -> FrameRule {
        match self.realigned(svma, ctx) {
            Err(gimli::Error::NoUnwindInfoForAddress) => FrameRule::NoTable,
            Err(_) | Ok(None) => FrameRule::Table,
            Ok(Some(r)) => FrameRule::Realigned(r),
        }
    }

    /// The rule of the realigned frame at `svma`, if the frame there is
    /// one (its CFA is `*(rbp + N)`); `None` for any other frame;
    /// `NoUnwindInfoForAddress` when no entry covers it.
    fn realigned(
        &self,
        svma: u64,
        ctx: &mut UnwindContext<usize>,
    ) -> gimli::Result<Option<Realigned>> {
        let eh = EhFrame::new(&self.eh_frame, LittleEndian);
        let mut bases = BaseAddresses::default().set_eh_frame(self.eh_frame_svma);
        if let Some(t) = self.text_svma {
            bases = bases.set_text(t);
        }
        if let Some(g) = self.got_svma {
            bases = bases.set_got(g);
        }
        let fde = match &self.eh_frame_hdr {
            Some((hdr, hdr_svma)) => {
                bases = bases.set_eh_frame_hdr(*hdr_svma);
                let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8)?;
                match parsed.table() {
                    Some(table) => {
                        table.fde_for_address(&eh, &bases, svma, EhFrame::cie_from_offset)?
                    }
                    None => eh.fde_for_address(&bases, svma, EhFrame::cie_from_offset)?,
                }
            }
            None => eh.fde_for_address(&bases, svma, EhFrame::cie_from_offset)?,
        };
        let row = fde.unwind_info_for_address(&eh, &bases, ctx, svma)?;
        let CfaRule::Expression(e) = row.cfa() else {
            return Ok(None);
        };
        let Some(cfa_at_bp) = breg6(e.get(&eh)?.0.slice(), true) else {
            return Ok(None);
        };
        let ra_at_cfa = match row.register(X86_64::RA) {
            Some(RegisterRule::Offset(o)) => o,
            _ => return Ok(None),
        };
        let bp = match row.register(X86_64::RBP) {
            None | Some(RegisterRule::SameValue) | Some(RegisterRule::Undefined) => SavedBp::Same,
            Some(RegisterRule::Offset(o)) => SavedBp::AtCfa(o),
            Some(RegisterRule::Expression(e)) => match breg6(e.get(&eh)?.0.slice(), false) {
                Some(n) => SavedBp::AtBp(n),
                None => return Ok(None),
            },
            Some(_) => return Ok(None),
        };
        Ok(Some(Realigned {
            cfa_at_bp,
            ra_at_cfa,
            bp,
        }))
    }
}

/// The `N` of the expression `DW_OP_breg6 N` (then `DW_OP_deref` when
/// `deref`), and nothing else.
fn breg6(ops: &[u8], deref: bool) -> Option<i64> {
    let (&op, mut rest) = ops.split_first()?;
    if op != DW_OP_BREG6 {
        return None;
    }
    let n = sleb128(&mut rest)?;
    match (deref, rest) {
        (true, [DW_OP_DEREF]) | (false, []) => Some(n),
        _ => None,
    }
}

/// A signed LEB128 number from the front of `b`.
fn sleb128(b: &mut &[u8]) -> Option<i64> {
    let (mut value, mut shift) = (0i64, 0u32);
    loop {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        if shift >= 64 {
            return None;
        }
        value |= i64::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            if shift < 64 && byte & 0x40 != 0 {
                value |= -1i64 << shift;
            }
            return Some(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_the_realignment_expressions() {
        // DW_OP_breg6 -40; DW_OP_deref
        assert_eq!(breg6(&[0x76, 0x58, 0x06], true), Some(-40));
        assert_eq!(breg6(&[0x76, 0x78, 0x06], true), Some(-8));
        assert_eq!(breg6(&[0x76, 0x00], false), Some(0));
        // Missing the deref, or more after it, or another register.
        assert_eq!(breg6(&[0x76, 0x58], true), None);
        assert_eq!(breg6(&[0x76, 0x58, 0x06, 0x06], true), None);
        assert_eq!(breg6(&[0x77, 0x08, 0x06], true), None);
        assert_eq!(breg6(&[0x76], true), None);
        // A long number.
        assert_eq!(sleb128(&mut &[0x80, 0x7f][..]), Some(-128));
    }
}
