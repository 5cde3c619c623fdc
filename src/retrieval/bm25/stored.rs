//! A scope's BM25 index as it is stored: CSR postings in Arrow record batches with the columns
//! `term` (sorted, byte order), `docs` and `tfs` (lists of u32). A stored index is searched in
//! place over its batches (memory-mapped by the storage layer), so opening it costs what a query
//! touches, not a rebuild; and per-repository indexes merge into the all-repository one by
//! streaming through their sorted terms, never holding every posting at once.

use super::{lucene_idf, Index, Postings};
use arrow::array::{Array, ArrayRef, AsArray, ListArray, RecordBatch, StringArray, UInt32Array};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// Postings per record batch before the next one starts: bounds the memory a build or merge holds
/// for the batch being made (measured at 457 repositories, index stage alone: 1 << 18 postings
/// peaked at 76 MB, 1 << 16 at 70 MB).
pub const BATCH_POSTINGS: usize = 1 << 16;

fn list_field() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::UInt32, false))
}

/// The stored index's Arrow schema: `term`, `docs`, `tfs`.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("term", DataType::Utf8, false),
        Field::new("docs", DataType::List(list_field()), false),
        Field::new("tfs", DataType::List(list_field()), false),
    ]))
}

/// Collects terms in sorted order into record batches of about [`BATCH_POSTINGS`] postings.
#[derive(Default)]
pub struct BatchBuilder {
    terms: Vec<u8>,
    term_offsets: Vec<i32>,
    docs: Vec<u32>,
    tfs: Vec<u32>,
    offsets: Vec<i32>,
}

impl BatchBuilder {
    /// Starts a term; its postings follow through [`BatchBuilder::posting`].
    pub fn term(&mut self, term: &str) {
        if self.term_offsets.is_empty() {
            self.term_offsets.push(0);
            self.offsets.push(0);
        }
        self.terms.extend_from_slice(term.as_bytes());
        self.term_offsets.push(self.terms.len() as i32);
        self.offsets.push(self.docs.len() as i32);
    }

    /// Adds one posting to the current term.
    pub fn posting(&mut self, doc: u32, tf: u32) {
        self.docs.push(doc);
        self.tfs.push(tf);
        *self.offsets.last_mut().expect("a term was started") = self.docs.len() as i32;
    }

    /// Whether the current batch is full (check between terms).
    pub fn full(&self) -> bool {
        self.docs.len() >= BATCH_POSTINGS
    }

    /// Number of terms in the current batch.
    pub fn len(&self) -> usize {
        self.term_offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The current batch, leaving the builder empty.
    pub fn finish(&mut self) -> RecordBatch {
        let b = std::mem::take(self);
        let term_offsets = if b.term_offsets.is_empty() {
            vec![0]
        } else {
            b.term_offsets
        };
        let offsets = if b.offsets.is_empty() {
            vec![0]
        } else {
            b.offsets
        };
        let terms = StringArray::new(
            OffsetBuffer::new(ScalarBuffer::from(term_offsets)),
            b.terms.into(),
            None,
        );
        let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
        let docs = ListArray::new(
            list_field(),
            offsets.clone(),
            Arc::new(UInt32Array::from(b.docs)),
            None,
        );
        let tfs = ListArray::new(
            list_field(),
            offsets,
            Arc::new(UInt32Array::from(b.tfs)),
            None,
        );
        let columns: Vec<ArrayRef> = vec![Arc::new(terms), Arc::new(docs), Arc::new(tfs)];
        RecordBatch::try_new(schema(), columns).expect("columns match the schema")
    }
}

/// The stored form of an in-memory index, its terms sorted, a batch at a time: each batch goes to
/// `each` as soon as it is full, so a writer holds one batch of the stored form beside the index,
/// not all of it.
pub fn encode_each<E>(
    ix: &Index,
    mut each: impl FnMut(RecordBatch) -> Result<(), E>,
) -> Result<(), E> {
    let mut terms: Vec<_> = ix.terms().collect();
    terms.sort_unstable_by_key(|(t, _)| *t);
    let mut b = BatchBuilder::default();
    let mut any = false;
    for (t, (docs, tfs)) in terms {
        b.term(t);
        for (&d, &f) in docs.iter().zip(tfs) {
            b.posting(d, f);
        }
        if b.full() {
            each(b.finish())?;
            any = true;
        }
    }
    if !b.is_empty() || !any {
        each(b.finish())?;
    }
    Ok(())
}

/// One batch of a stored index, its columns viewed as plain slices.
struct Part {
    terms: StringArray,
    docs_offsets: OffsetBuffer<i32>,
    docs: ScalarBuffer<u32>,
    tfs_offsets: OffsetBuffer<i32>,
    tfs: ScalarBuffer<u32>,
}

impl Part {
    fn new(batch: &RecordBatch) -> Result<Part, String> {
        let col = |name: &str| {
            batch
                .column_by_name(name)
                .ok_or_else(|| format!("stored index has no `{name}` column"))
        };
        let terms = col("term")?
            .as_string_opt::<i32>()
            .ok_or("`term` is not a string column")?
            .clone();
        let list = |name: &str| -> Result<(OffsetBuffer<i32>, ScalarBuffer<u32>), String> {
            let l = col(name)?
                .as_list_opt::<i32>()
                .ok_or_else(|| format!("`{name}` is not a list column"))?;
            let v = l
                .values()
                .as_primitive_opt::<UInt32Type>()
                .ok_or_else(|| format!("`{name}` does not hold u32 values"))?;
            Ok((l.offsets().clone(), v.values().clone()))
        };
        let (docs_offsets, docs) = list("docs")?;
        let (tfs_offsets, tfs) = list("tfs")?;
        if docs_offsets != tfs_offsets {
            return Err("`docs` and `tfs` lists differ in shape".into());
        }
        Ok(Part {
            terms,
            docs_offsets,
            docs,
            tfs_offsets,
            tfs,
        })
    }

    fn len(&self) -> usize {
        self.terms.len()
    }

    fn row(&self, i: usize) -> (&str, &[u32], &[u32]) {
        let (d0, d1) = (
            self.docs_offsets[i] as usize,
            self.docs_offsets[i + 1] as usize,
        );
        let (f0, f1) = (
            self.tfs_offsets[i] as usize,
            self.tfs_offsets[i + 1] as usize,
        );
        (self.terms.value(i), &self.docs[d0..d1], &self.tfs[f0..f1])
    }

    fn find(&self, term: &str) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.terms.value(mid).cmp(term) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }
}

/// A stored index opened over its batches and its documents' lengths.
pub struct Stored {
    parts: Vec<Part>,
    lengths: Vec<u32>,
    /// Whether the batches lie in a read-only file mapping, whose pages may be dropped.
    mapped: bool,
}

/// Tells the kernel that the whole pages inside `bytes` are no longer needed. Only for read-only
/// file mappings: their pages are dropped from this process and read again from the file if
/// touched (for anonymous memory this would zero it, so [`Stored`] only does it when mapped).
fn drop_pages(bytes: &[u8]) {
    #[cfg(unix)]
    {
        let page = 4096usize;
        let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
        let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
        if end > start {
            // SAFETY: the range lies inside a live read-only file mapping (see the caller); the
            // advice only drops resident pages, which are re-read from the file if touched.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

fn as_bytes<T: arrow::datatypes::ArrowNativeType>(s: &[T]) -> &[u8] {
    // SAFETY: plain numeric values viewed as bytes, same lifetime.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

impl Part {
    /// The pages of rows before `row` (all rows when `row` is `len()`).
    fn release_before(&self, row: usize) {
        let to = |offs: &OffsetBuffer<i32>| offs[row.min(offs.len() - 1)] as usize;
        let values = self.terms.values();
        drop_pages(&values[..to(self.terms.offsets()).min(values.len())]);
        drop_pages(as_bytes(&self.terms.offsets()[..row]));
        drop_pages(as_bytes(&self.docs[..to(&self.docs_offsets)]));
        drop_pages(as_bytes(&self.docs_offsets[..row]));
        drop_pages(as_bytes(&self.tfs[..to(&self.tfs_offsets)]));
        drop_pages(as_bytes(&self.tfs_offsets[..row]));
    }
}

impl Stored {
    /// Opens the batches of a stored index (terms sorted across batches) with the lengths of its
    /// documents, by internal number. Checks shape and order here, and each posting list when a
    /// query looks it up: opening touches no posting.
    pub fn open(batches: &[RecordBatch], lengths: Vec<u32>) -> Result<Stored, String> {
        let parts: Vec<Part> = batches
            .iter()
            .map(Part::new)
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .filter(|p| p.len() > 0)
            .collect();
        for w in parts.windows(2) {
            if w[0].terms.value(w[0].len() - 1) >= w[1].terms.value(0) {
                return Err("stored index batches are not in term order".into());
            }
        }
        Ok(Stored {
            parts,
            lengths,
            mapped: false,
        })
    }

    /// Marks the batches as lying in a read-only file mapping: a merge then drops the pages it has
    /// read, so its resident memory stays flat. Opening has already touched the term data (Arrow
    /// validates it), which is dropped here too.
    ///
    /// # Safety
    /// Every batch must lie in a read-only file mapping that outlives this index.
    pub unsafe fn set_mapped(&mut self) {
        self.mapped = true;
        for p in &self.parts {
            p.release_before(p.len());
        }
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Every term with its postings, in term order.
    pub fn terms(&self) -> impl Iterator<Item = (&str, &[u32], &[u32])> {
        self.parts
            .iter()
            .flat_map(|p| (0..p.len()).map(move |i| p.row(i)))
    }

    /// Document frequency of `term`.
    pub fn df(&self, term: &str) -> usize {
        self.list(term).map_or(0, |(d, _)| d.len())
    }

    /// Lucene idf of `term` in this scope (0 for unknown terms).
    pub fn idf(&self, term: &str) -> f64 {
        lucene_idf(self.len(), self.df(term))
    }

    /// Lucene idf of `term`, where a term the scope lacks weighs most (df 0 in the formula):
    /// how much a question's term says, for judging whether a pack supports an answer.
    pub fn idf_or_max(&self, term: &str) -> f64 {
        let (n, df) = (self.len() as f64, self.df(term) as f64);
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }
}

impl Postings for Stored {
    fn lengths(&self) -> &[u32] {
        &self.lengths
    }
    fn list(&self, term: &str) -> Option<(&[u32], &[u32])> {
        // The last batch whose first term is not after `term` is the only one that can hold it.
        let at = self
            .parts
            .partition_point(|p| p.terms.value(0) <= term)
            .checked_sub(1)?;
        let p = &self.parts[at];
        let (_, d, f) = p.row(p.find(term)?);
        // A list naming a document the scope does not have is corrupt: it matches nothing.
        let n = self.lengths.len();
        d.iter().all(|&x| (x as usize) < n).then_some((d, f))
    }
}

/// Merges stored indexes over disjoint document sets into one: the documents of input `i` are
/// numbered after those of every input before it, so the result equals an index built over the
/// inputs' documents in that order. Batches go to `emit` as they fill; memory is one batch.
pub fn merge<E>(
    inputs: &[&Stored],
    mut emit: impl FnMut(RecordBatch) -> Result<(), E>,
) -> Result<(), E> {
    let mut base = Vec::with_capacity(inputs.len());
    let mut total = 0u32;
    for s in inputs {
        base.push(total);
        total += s.len() as u32;
    }
    // Each input's position: (batch, row).
    let mut at: Vec<(usize, usize)> = vec![(0, 0); inputs.len()];
    let current = |i: usize, at: &[(usize, usize)]| -> Option<(&str, &[u32], &[u32])> {
        let (p, r) = at[i];
        inputs[i].parts.get(p).map(|part| part.row(r))
    };
    let advance = |i: usize, at: &mut [(usize, usize)]| {
        let (p, r) = at[i];
        let part = &inputs[i].parts[p];
        at[i] = if r + 1 < part.len() {
            (p, r + 1)
        } else {
            if inputs[i].mapped {
                part.release_before(part.len());
            }
            (p + 1, 0)
        };
    };
    let mut heap: BinaryHeap<Reverse<(&str, usize)>> = BinaryHeap::new();
    for i in 0..inputs.len() {
        if let Some((t, _, _)) = current(i, &at) {
            heap.push(Reverse((t, i)));
        }
    }
    let mut b = BatchBuilder::default();
    let mut wrote = false;
    while let Some(Reverse((term, first))) = heap.pop() {
        // Every input holding `term`, in input order (ties pop by input number).
        let mut holders = vec![first];
        while heap.peek().is_some_and(|Reverse((t, _))| *t == term) {
            let Reverse((_, i)) = heap.pop().expect("peeked");
            holders.push(i);
        }
        b.term(term);
        for i in holders {
            let (_, docs, tfs) = current(i, &at).expect("in the heap");
            for (&d, &f) in docs.iter().zip(tfs) {
                b.posting(base[i] + d, f);
            }
            advance(i, &mut at);
            if let Some((t, _, _)) = current(i, &at) {
                heap.push(Reverse((t, i)));
            }
        }
        if b.full() {
            emit(b.finish())?;
            wrote = true;
            // What every input has read so far is no longer needed.
            for (i, s) in inputs.iter().enumerate() {
                if let (true, Some(part)) = (s.mapped, s.parts.get(at[i].0)) {
                    part.release_before(at[i].1);
                }
            }
        }
    }
    if !b.is_empty() || !wrote {
        emit(b.finish())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::bm25::{Params, Searcher};

    fn open(ix: &Index) -> Stored {
        let mut batches = Vec::new();
        encode_each(ix, |b| {
            batches.push(b);
            Ok::<(), ()>(())
        })
        .unwrap();
        Stored::open(&batches, ix.lengths.clone()).unwrap()
    }

    #[test]
    fn a_stored_index_scores_exactly_as_the_built_one() {
        let ix = crate::retrieval::bm25::tests::docs();
        let st = open(&ix);
        for q in [
            vec!["cat"],
            vec!["dog", "mat"],
            vec!["cat", "dog", "cat"],
            vec!["zebra"],
        ] {
            let q: Vec<String> = q.into_iter().map(String::from).collect();
            let a = Searcher::new(&ix, Params::default()).search(&q, 10);
            let b = Searcher::new(&st, Params::default()).search(&q, 10);
            assert_eq!(a, b, "{q:?}");
        }
        assert_eq!(st.df("cat"), 2);
        assert_eq!(st.df("zebra"), 0);
        // A known term weighs its idf; an unknown one the most any term can.
        assert_eq!(st.idf_or_max("cat"), st.idf("cat"));
        let n = st.len() as f64;
        assert!((st.idf_or_max("zebra") - (1.0 + (n + 0.5) / 0.5).ln()).abs() < 1e-12);
        assert!(st.idf_or_max("zebra") > st.idf_or_max("cat"));
        let terms: Vec<&str> = st.terms().map(|(t, _, _)| t).collect();
        assert_eq!(terms, ["cat", "dog", "fog", "log", "mat", "sat"]);
    }

    #[test]
    fn merging_equals_building_over_all_documents() {
        let words = [
            "alpha", "beta", "gamma", "delta", "beta", "zeta", "alpha", "eta",
        ];
        let docs: Vec<(String, Vec<&str>)> = (0..40)
            .map(|i| {
                let terms = (0..(i % 7 + 1))
                    .map(|j| words[(i * 3 + j * 5) % 8])
                    .collect();
                (format!("d{i}"), terms)
            })
            .collect();
        let whole = Index::build(docs.clone());
        let (a, rest) = docs.split_at(13);
        let (b, c) = rest.split_at(20);
        let parts: Vec<Index> = [a, b, c].iter().map(|p| Index::build(p.to_vec())).collect();
        let stored: Vec<Stored> = parts.iter().map(open).collect();
        let mut batches = Vec::new();
        merge::<()>(&stored.iter().collect::<Vec<_>>(), |b| {
            batches.push(b);
            Ok(())
        })
        .unwrap();
        let merged = Stored::open(&batches, whole.lengths.clone()).unwrap();
        let want: Vec<(String, Vec<u32>, Vec<u32>)> = open(&whole)
            .terms()
            .map(|(t, d, f)| (t.to_string(), d.to_vec(), f.to_vec()))
            .collect();
        let got: Vec<(String, Vec<u32>, Vec<u32>)> = merged
            .terms()
            .map(|(t, d, f)| (t.to_string(), d.to_vec(), f.to_vec()))
            .collect();
        assert_eq!(got, want);
        let q: Vec<String> = vec!["beta".into(), "eta".into()];
        assert_eq!(
            Searcher::new(&whole, Params::default()).search(&q, 5),
            Searcher::new(&merged, Params::default()).search(&q, 5)
        );
    }

    #[test]
    fn lookups_cross_batch_boundaries() {
        let mut b = BatchBuilder::default();
        let mut batches = Vec::new();
        for (i, t) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            b.term(t);
            b.posting(i as u32, 1);
            if i % 2 == 1 {
                batches.push(b.finish());
            }
        }
        batches.push(b.finish());
        let st = Stored::open(&batches, vec![1; 5]).unwrap();
        for (i, t) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            assert_eq!(st.list(t).unwrap().0, &[i as u32][..], "{t}");
        }
        assert!(st.list("0").is_none() && st.list("bb").is_none() && st.list("f").is_none());
        let out_of_order = [batches[1].clone(), batches[0].clone()];
        assert!(Stored::open(&out_of_order, vec![1; 5]).is_err());
        // Documents past the scope's end: the lists that name them match nothing.
        let short = Stored::open(&batches, vec![1; 2]).unwrap();
        assert!(short.list("b").is_some() && short.list("c").is_none());
    }
}
