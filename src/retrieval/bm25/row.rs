//! A term's postings as one stored row holds them: LEB128 varints (document gaps, then
//! frequencies) or, in files of earlier releases, lists of u32; checked and decoded here, so that
//! a corrupt row matches nothing rather than something else.

use super::List;
use integer_encoding::VarInt;
use std::borrow::Cow;

/// Appends `v` to `out` as a LEB128 varint.
pub(super) fn push_varint(out: &mut Vec<u8>, v: u32) {
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    let mut buf = [0u8; 5];
    let n = v.encode_var(&mut buf);
    out.extend_from_slice(&buf[..n]);
}

/// Number of varints in `bytes` (the bytes that end one).
pub(super) fn varints(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b < 0x80).count()
}

/// A term's postings as stored.
#[derive(Clone, Copy)]
pub(super) enum Row<'a> {
    /// Lists of u32, as earlier releases stored them.
    Plain(&'a [u32], &'a [u32]),
    /// Varints: document gaps, then frequencies.
    Packed(&'a [u8], &'a [u8]),
}

/// A packed posting list checked whole without decoding it into memory.
pub(super) struct Packed<'a> {
    pub first: u32,
    pub last: u32,
    pub count: usize,
    /// The gaps after the first document's number.
    pub rest: &'a [u8],
    pub tfs: &'a [u8],
}

/// The numbers of a run of varints, each `None` once one is cut short or past u32 (and the run
/// ends there).
fn each_varint(bytes: &[u8]) -> impl Iterator<Item = Option<u32>> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = bytes.get(at..).filter(|r| !r.is_empty())?;
        Some(match u32::decode_var(rest) {
            Some((v, used)) => {
                at += used;
                Some(v)
            }
            None => {
                at = bytes.len();
                None
            }
        })
    })
}

/// The documents of a packed list of gaps (the first number is the first document), each `None`
/// once the list is corrupt: a varint that does not decode, a zero gap, or a sum past u32.
fn each_doc(gaps: &[u8]) -> impl Iterator<Item = Option<u32>> + '_ {
    let mut prev = None;
    each_varint(gaps).map(move |gap| {
        let doc = match (prev, gap?) {
            (None, g) => g,
            (Some(_), 0) => return None,
            (Some(p), g) => u32::checked_add(p, g)?,
        };
        prev = Some(doc);
        Some(doc)
    })
}

impl<'a> Row<'a> {
    /// A packed list's first and last documents and its length, checked as
    /// [`Row::decode`] checks it; `None` for a list of the earlier form or a corrupt one.
    pub fn packed(self) -> Option<Packed<'a>> {
        let Row::Packed(d, f) = self else {
            return None;
        };
        let (first, used) = u32::decode_var(d)?;
        let (mut last, mut count) = (first, 0);
        for doc in each_doc(d) {
            last = doc?;
            count += 1;
        }
        let tfs = each_varint(f).try_fold(0, |n, tf| tf.map(|_| n + 1))?;
        (tfs == count).then_some(Packed {
            first,
            last,
            count,
            rest: &d[used..],
            tfs: f,
        })
    }

    /// The postings, or `None` when they are corrupt: a varint cut short or past u32, documents
    /// that do not ascend, or as many frequencies as documents lacking.
    pub fn decode(self) -> Option<List<'a>> {
        let (d, f) = match self {
            Row::Plain(d, f) => {
                let ascending = d.windows(2).all(|w| w[0] < w[1]);
                return (ascending && d.len() == f.len())
                    .then_some((Cow::Borrowed(d), Cow::Borrowed(f)));
            }
            Row::Packed(d, f) => (d, f),
        };
        let mut docs = Vec::with_capacity(varints(d));
        for doc in each_doc(d) {
            docs.push(doc?);
        }
        let mut tfs = Vec::with_capacity(docs.len());
        for tf in each_varint(f) {
            tfs.push(tf?);
        }
        (tfs.len() == docs.len()).then_some((Cow::Owned(docs), Cow::Owned(tfs)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(docs: &[u32], tfs: &[u32]) -> (Vec<u8>, Vec<u8>) {
        let (mut d, mut f, mut prev) = (Vec::new(), Vec::new(), 0);
        for (i, (&doc, &tf)) in docs.iter().zip(tfs).enumerate() {
            push_varint(&mut d, if i == 0 { doc } else { doc - prev });
            push_varint(&mut f, tf);
            prev = doc;
        }
        (d, f)
    }

    #[test]
    fn a_packed_row_is_checked_alike_whole_and_decoded() {
        let (d, f) = packed(&[3, 4, 300, 70_000, u32::MAX], &[1, 2, 128, 1, 7]);
        let row = Row::Packed(&d, &f);
        let (docs, tfs) = row.decode().unwrap();
        assert_eq!(&docs[..], &[3, 4, 300, 70_000, u32::MAX]);
        assert_eq!(&tfs[..], &[1, 2, 128, 1, 7]);
        let p = row.packed().unwrap();
        assert_eq!((p.first, p.last, p.count), (3, u32::MAX, 5));
        assert_eq!(varints(&d), 5);
        // Corrupt: cut short, past u32, a zero gap, a frequency missing, a varint of six bytes.
        let mut past = d.clone();
        push_varint(&mut past, 1);
        let mut more = f.clone();
        push_varint(&mut more, 1);
        for (d, f) in [
            (&d[..d.len() - 1], &f[..]),
            (&past[..], &more[..]),
            (&[3, 0][..], &[1, 1][..]),
            (&d[..], &f[..f.len() - 1]),
            (&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01][..], &[1][..]),
        ] {
            let row = Row::Packed(d, f);
            assert!(
                row.decode().is_none() && row.packed().is_none(),
                "{d:?} {f:?}"
            );
        }
        // The plain form is checked for order and length, and has no packed view.
        assert!(Row::Plain(&[1, 2], &[1, 1]).decode().is_some());
        assert!(Row::Plain(&[2, 2], &[1, 1]).decode().is_none());
        assert!(Row::Plain(&[1, 2], &[1]).decode().is_none());
        assert!(Row::Plain(&[1, 2], &[1, 1]).packed().is_none());
    }
}
