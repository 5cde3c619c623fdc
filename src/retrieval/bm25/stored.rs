//! A scope's BM25 index as it is stored: postings in Arrow record batches with the columns `term`
//! (sorted, byte order), `docs` (LEB128 varints of each document number's gap from the one before,
//! the first its own number) and `tfs` (LEB128 varints). Files of earlier releases hold `docs` and
//! `tfs` as lists of u32 and are read as they are. A stored index is searched in place over its
//! batches (memory-mapped by the storage layer), so opening it costs what a query touches, not a
//! rebuild; and per-repository indexes merge into the all-repository one by streaming through
//! their sorted terms, never holding every posting at once.

use super::row::{push_varint, varints, Packed, Row};
use super::{lucene_idf, Index, List, Postings};
use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, RecordBatch, StringArray, UInt32Array};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// Postings per record batch before the next one starts: bounds the memory a build or merge holds
/// for the batch being made (measured at 457 repositories, index stage alone: 1 << 18 postings
/// peaked at 76 MB, 1 << 16 at 70 MB).
pub const BATCH_POSTINGS: usize = 1 << 16;

/// The stored form, part of every index's reuse key: an output directory of an earlier release
/// has its indexes rebuilt once, so that no `bm25_index` table mixes the two forms.
pub const FORMAT: &str = "packed-postings";

/// The stored index's Arrow schema: `term`, `docs`, `tfs`.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("term", DataType::Utf8, false),
        Field::new("docs", DataType::Binary, false),
        Field::new("tfs", DataType::Binary, false),
    ]))
}

/// Collects terms in sorted order into record batches of about [`BATCH_POSTINGS`] postings.
#[derive(Default)]
pub struct BatchBuilder {
    terms: Vec<u8>,
    term_offsets: Vec<i32>,
    docs: Vec<u8>,
    docs_offsets: Vec<i32>,
    tfs: Vec<u8>,
    tfs_offsets: Vec<i32>,
    /// The current term's last document.
    last: Option<u32>,
    postings: usize,
}

impl BatchBuilder {
    /// Starts a term; its postings follow through [`BatchBuilder::posting`].
    pub fn term(&mut self, term: &str) {
        if self.term_offsets.is_empty() {
            self.term_offsets.push(0);
            self.docs_offsets.push(0);
            self.tfs_offsets.push(0);
        }
        self.terms.extend_from_slice(term.as_bytes());
        self.term_offsets.push(self.terms.len() as i32);
        self.docs_offsets.push(self.docs.len() as i32);
        self.tfs_offsets.push(self.tfs.len() as i32);
        self.last = None;
    }

    /// Adds one posting to the current term; documents come in ascending order.
    pub fn posting(&mut self, doc: u32, tf: u32) {
        let gap = match self.last {
            None => doc,
            Some(prev) => {
                debug_assert!(doc > prev, "postings ascend");
                doc - prev
            }
        };
        self.last = Some(doc);
        push_varint(&mut self.docs, gap);
        push_varint(&mut self.tfs, tf);
        *self.docs_offsets.last_mut().expect("a term was started") = self.docs.len() as i32;
        *self.tfs_offsets.last_mut().expect("a term was started") = self.tfs.len() as i32;
        self.postings += 1;
    }

    /// Adds the packed postings of another index to the current term, every document number
    /// raised by `base`: only the first gap is re-encoded, the rest of the bytes are copied.
    fn append_packed(&mut self, packed: &Packed, base: u32) {
        let first = base + packed.first;
        let gap = match self.last {
            None => first,
            Some(prev) => {
                debug_assert!(first > prev, "postings ascend");
                first - prev
            }
        };
        push_varint(&mut self.docs, gap);
        self.docs.extend_from_slice(packed.rest);
        self.tfs.extend_from_slice(packed.tfs);
        self.last = Some(base + packed.last);
        *self.docs_offsets.last_mut().expect("a term was started") = self.docs.len() as i32;
        *self.tfs_offsets.last_mut().expect("a term was started") = self.tfs.len() as i32;
        self.postings += packed.count;
    }

    /// Whether the current batch is full (check between terms).
    pub fn full(&self) -> bool {
        self.postings >= BATCH_POSTINGS
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
        let offsets = |o: Vec<i32>| {
            OffsetBuffer::new(ScalarBuffer::from(if o.is_empty() { vec![0] } else { o }))
        };
        let terms = StringArray::new(offsets(b.term_offsets), b.terms.into(), None);
        let docs = BinaryArray::new(offsets(b.docs_offsets), b.docs.into(), None);
        let tfs = BinaryArray::new(offsets(b.tfs_offsets), b.tfs.into(), None);
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

/// The document frequency of each term of a stored batch, in either form.
pub fn dfs(batch: &RecordBatch) -> Result<UInt32Array, String> {
    let docs = batch
        .column_by_name("docs")
        .ok_or("stored index has no `docs` column")?;
    if let Some(packed) = docs.as_binary_opt::<i32>() {
        return Ok(packed
            .iter()
            .map(|v| varints(v.unwrap_or_default()) as u32)
            .collect());
    }
    let lists = docs
        .as_list_opt::<i32>()
        .ok_or("`docs` is neither packed nor a list column")?;
    Ok(lists
        .offsets()
        .windows(2)
        .map(|w| (w[1] - w[0]) as u32)
        .collect())
}

/// How a batch holds its postings.
enum Lists {
    Plain {
        offsets: OffsetBuffer<i32>,
        docs: ScalarBuffer<u32>,
        tfs: ScalarBuffer<u32>,
    },
    Packed {
        docs: BinaryArray,
        tfs: BinaryArray,
    },
}

/// One batch of a stored index, its columns viewed in place.
struct Part {
    terms: StringArray,
    lists: Lists,
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
        let (docs, tfs) = (col("docs")?, col("tfs")?);
        let lists = match (docs.as_binary_opt::<i32>(), tfs.as_binary_opt::<i32>()) {
            (Some(docs), Some(tfs)) => Lists::Packed {
                docs: docs.clone(),
                tfs: tfs.clone(),
            },
            _ => {
                let list = |l: &ArrayRef, name: &str| {
                    let l = l
                        .as_list_opt::<i32>()
                        .ok_or_else(|| format!("`{name}` is neither packed nor a list column"))?;
                    let v = l
                        .values()
                        .as_primitive_opt::<UInt32Type>()
                        .ok_or_else(|| format!("`{name}` does not hold u32 values"))?;
                    Ok::<_, String>((l.offsets().clone(), v.values().clone()))
                };
                let (offsets, docs) = list(docs, "docs")?;
                let (tfs_offsets, tfs) = list(tfs, "tfs")?;
                if offsets != tfs_offsets {
                    return Err("`docs` and `tfs` lists differ in shape".into());
                }
                Lists::Plain { offsets, docs, tfs }
            }
        };
        if let Lists::Packed { docs, tfs } = &lists {
            if docs.len() != terms.len() || tfs.len() != terms.len() {
                return Err("`docs` and `tfs` do not have a row per term".into());
            }
        }
        Ok(Part { terms, lists })
    }

    fn len(&self) -> usize {
        self.terms.len()
    }

    fn row(&self, i: usize) -> (&str, Row<'_>) {
        let postings = match &self.lists {
            Lists::Plain { offsets, docs, tfs } => {
                let (a, b) = (offsets[i] as usize, offsets[i + 1] as usize);
                Row::Plain(&docs[a..b], &tfs[a..b])
            }
            Lists::Packed { docs, tfs } => Row::Packed(docs.value(i), tfs.value(i)),
        };
        (self.terms.value(i), postings)
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
    /// The file the batches were read from, for messages.
    origin: Option<std::path::PathBuf>,
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
        let strings = |values: &[u8], offsets: &OffsetBuffer<i32>| {
            drop_pages(&values[..to(offsets).min(values.len())]);
            drop_pages(as_bytes(&offsets[..row]));
        };
        strings(self.terms.values(), self.terms.offsets());
        match &self.lists {
            Lists::Plain { offsets, docs, tfs } => {
                let end = to(offsets);
                drop_pages(as_bytes(&docs[..end]));
                drop_pages(as_bytes(&tfs[..end]));
                drop_pages(as_bytes(&offsets[..row]));
            }
            Lists::Packed { docs, tfs } => {
                strings(docs.values(), docs.offsets());
                strings(tfs.values(), tfs.offsets());
            }
        }
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
            origin: None,
        })
    }

    /// Names the file the index was read from.
    pub fn read_from(mut self, path: std::path::PathBuf) -> Stored {
        self.origin = Some(path);
        self
    }

    /// The file the index was read from, if it was named.
    pub fn origin(&self) -> Option<&std::path::Path> {
        self.origin.as_deref()
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

    /// Every term with its postings, in term order; `None` for postings that are corrupt.
    pub fn terms(&self) -> impl Iterator<Item = (&str, Option<List<'_>>)> {
        self.parts.iter().flat_map(|p| {
            (0..p.len()).map(move |i| {
                let (t, row) = p.row(i);
                (t, row.decode())
            })
        })
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
    fn list(&self, term: &str) -> Option<List<'_>> {
        // The last batch whose first term is not after `term` is the only one that can hold it.
        let at = self
            .parts
            .partition_point(|p| p.terms.value(0) <= term)
            .checked_sub(1)?;
        let p = &self.parts[at];
        let (d, f) = p.row(p.find(term)?).1.decode()?;
        // A list naming a document the scope does not have is corrupt: it matches nothing.
        let n = self.lengths.len();
        d.iter().all(|&x| (x as usize) < n).then_some((d, f))
    }
}

/// Merges stored indexes over disjoint document sets into one: the documents of input `i` are
/// numbered after those of every input before it, so the result equals an index built over the
/// inputs' documents in that order. Batches go to `emit` as they fill; memory is one batch. A
/// corrupt posting list ends the merge with `corrupt(input, term)`.
pub fn merge<E>(
    inputs: &[&Stored],
    mut emit: impl FnMut(RecordBatch) -> Result<(), E>,
    corrupt: impl Fn(usize, &str) -> E,
) -> Result<(), E> {
    let mut base = Vec::with_capacity(inputs.len());
    let mut total = 0u32;
    for s in inputs {
        base.push(total);
        total += s.len() as u32;
    }
    // Each input's position: (batch, row).
    let mut at: Vec<(usize, usize)> = vec![(0, 0); inputs.len()];
    let current = |i: usize, at: &[(usize, usize)]| -> Option<(&str, Row<'_>)> {
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
        if let Some((t, _)) = current(i, &at) {
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
            let (_, row) = current(i, &at).expect("in the heap");
            if let Row::Packed(..) = row {
                let packed = row.packed().ok_or_else(|| corrupt(i, term))?;
                b.append_packed(&packed, base[i]);
            } else {
                let (docs, tfs) = row.decode().ok_or_else(|| corrupt(i, term))?;
                for (&d, &f) in docs.iter().zip(tfs.iter()) {
                    b.posting(base[i] + d, f);
                }
            }
            advance(i, &mut at);
            if let Some((t, _)) = current(i, &at) {
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
        let terms: Vec<&str> = st.terms().map(|(t, _)| t).collect();
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
        let refs: Vec<&Stored> = stored.iter().collect();
        let pushed = |b| {
            batches.push(b);
            Ok(())
        };
        merge(&refs, pushed, |i, t| format!("{i} {t}")).unwrap();
        let merged = Stored::open(&batches, whole.lengths.clone()).unwrap();
        let rows = |st: &Stored| -> Vec<(String, Vec<u32>, Vec<u32>)> {
            st.terms()
                .map(|(t, l)| {
                    let (d, f) = l.unwrap();
                    (t.to_string(), d.to_vec(), f.to_vec())
                })
                .collect()
        };
        let want = rows(&open(&whole));
        let got = rows(&merged);
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

    /// A batch in the form of earlier releases: `docs` and `tfs` as lists of u32.
    fn plain_batch(rows: &[(&str, &[u32], &[u32])]) -> RecordBatch {
        use arrow::array::ListArray;
        let item = || Arc::new(Field::new("item", DataType::UInt32, false));
        let list = |lists: Vec<&[u32]>| {
            let offsets = OffsetBuffer::from_lengths(lists.iter().map(|l| l.len()));
            let values: Vec<u32> = lists.concat();
            ListArray::new(item(), offsets, Arc::new(UInt32Array::from(values)), None)
        };
        let terms = StringArray::from_iter_values(rows.iter().map(|r| r.0));
        let docs = list(rows.iter().map(|r| r.1).collect());
        let tfs = list(rows.iter().map(|r| r.2).collect());
        let schema = Schema::new(vec![
            Field::new("term", DataType::Utf8, false),
            Field::new("docs", DataType::List(item()), false),
            Field::new("tfs", DataType::List(item()), false),
        ]);
        let columns: Vec<ArrayRef> = vec![Arc::new(terms), Arc::new(docs), Arc::new(tfs)];
        RecordBatch::try_new(Arc::new(schema), columns).unwrap()
    }

    #[test]
    fn the_form_of_earlier_releases_scores_as_the_packed_one() {
        let ix = crate::retrieval::bm25::tests::docs();
        let packed = open(&ix);
        let mut terms: Vec<_> = ix.terms().collect();
        terms.sort_unstable_by_key(|(t, _)| *t);
        let rows: Vec<(&str, &[u32], &[u32])> =
            terms.iter().map(|(t, (d, f))| (*t, *d, *f)).collect();
        let batch = plain_batch(&rows);
        let plain = Stored::open(std::slice::from_ref(&batch), ix.lengths.clone()).unwrap();
        for t in ["cat", "dog", "mat", "zebra"] {
            assert_eq!(plain.list(t), packed.list(t), "{t}");
        }
        let q: Vec<String> = vec!["cat".into(), "dog".into(), "mat".into()];
        assert_eq!(
            Searcher::new(&plain, Params::default()).search(&q, 10),
            Searcher::new(&packed, Params::default()).search(&q, 10)
        );
        assert_eq!(dfs(&batch).unwrap().values(), &[2, 2, 1, 1, 1, 1][..]);
        // A merge reads either form and writes the packed one.
        let mut out = Vec::new();
        let pushed = |b| {
            out.push(b);
            Ok(())
        };
        merge(&[&plain, &packed], pushed, |i, t| format!("{i} {t}")).unwrap();
        assert!(out[0].column(1).as_binary_opt::<i32>().is_some());
        assert_eq!(
            dfs(&out[0]).unwrap().value(0),
            4,
            "cat: twice in each input"
        );
        // Earlier lists that do not ascend are corrupt.
        let bad = plain_batch(&[("a", &[3, 1], &[1, 1])]);
        let bad = Stored::open(&[bad], vec![1; 4]).unwrap();
        assert!(bad.list("a").is_none());
    }

    #[test]
    fn postings_are_packed_as_gaps_and_checked_when_read() {
        let mut b = BatchBuilder::default();
        b.term("big");
        for (d, f) in [(0, 1), (1, 300), (200, 1), (70_000, 2)] {
            b.posting(d, f);
        }
        b.term("one");
        b.posting(5, 1);
        let batch = b.finish();
        let docs = batch.column(1).as_binary::<i32>();
        // Gaps 0, 1, 199 and 69,800 take 1, 1, 2 and 3 bytes; u32 lists took 4 each.
        assert_eq!(docs.value(0).len(), 7);
        assert_eq!(dfs(&batch).unwrap().values(), &[4, 1][..]);
        let st = Stored::open(std::slice::from_ref(&batch), vec![1; 70_001]).unwrap();
        let (d, f) = st.list("big").unwrap();
        assert_eq!(
            (&d[..], &f[..]),
            (&[0, 1, 200, 70_000][..], &[1, 300, 1, 2][..])
        );
        // Fewer documents than the postings name: nothing matches.
        let short = Stored::open(std::slice::from_ref(&batch), vec![1; 300]).unwrap();
        assert!(short.list("big").is_none() && short.list("one").is_some());
        // Corrupt bytes: a varint cut short, a zero gap, counts that differ. Each is refused by a
        // lookup and ends a merge naming the term.
        for (docs, tfs) in [
            (vec![0x80u8], vec![1u8]),
            (vec![3, 0], vec![1, 1]),
            (vec![3, 1], vec![1]),
        ] {
            let batch = RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(StringArray::from(vec!["t"])),
                    Arc::new(BinaryArray::from_vec(vec![&docs[..]])),
                    Arc::new(BinaryArray::from_vec(vec![&tfs[..]])),
                ],
            )
            .unwrap();
            let st = Stored::open(&[batch], vec![1; 10]).unwrap();
            assert!(st.list("t").is_none(), "{docs:?} {tfs:?}");
            let err = merge(&[&st], |_| Ok(()), |i, t| format!("input {i}: `{t}`")).unwrap_err();
            assert_eq!(err, "input 0: `t`");
        }
    }
}
