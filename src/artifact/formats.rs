//! Encoding and decoding of artifact files: Parquet (with column projection) and Arrow IPC
//! (decoded in place over a buffer, which may be a memory mapping).

use crate::error::{because, Error, IoContext, Result};
use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::path::Path;
use std::sync::Arc;

/// Decodes an Arrow IPC file held in `buffer`; arrays point into the buffer (no copy).
pub fn read_ipc(path: &Path, buffer: &Buffer) -> Result<Vec<RecordBatch>> {
    use arrow::ipc::convert::fb_to_schema;
    use arrow::ipc::reader::{read_footer_length, FileDecoder};
    let bad = |e: String| Error::artifact(path, because("not a readable Arrow IPC file", e));
    if buffer.len() < 10 {
        return Err(bad("too short".into()));
    }
    let trailer = buffer.len() - 10;
    let footer_len = read_footer_length(buffer[trailer..].try_into().expect("10 bytes"))
        .map_err(|e| bad(e.to_string()))?;
    if footer_len > trailer {
        return Err(bad("footer length past the start".into()));
    }
    let footer = arrow::ipc::root_as_footer(&buffer[trailer - footer_len..trailer])
        .map_err(|e| bad(e.to_string()))?;
    let schema = fb_to_schema(footer.schema().ok_or_else(|| bad("no schema".into()))?);
    let decoder = FileDecoder::new(Arc::new(schema), footer.version());
    let mut out = Vec::new();
    for block in footer.recordBatches().into_iter().flatten() {
        let start = block.offset() as usize;
        let len = block.bodyLength() as usize + block.metaDataLength() as usize;
        if start.checked_add(len).is_none_or(|end| end > buffer.len()) {
            return Err(bad("a block lies outside the file".into()));
        }
        let data = buffer.slice_with_length(start, len);
        if let Some(b) = decoder
            .read_record_batch(block, &data)
            .map_err(|e| bad(e.to_string()))?
        {
            out.push(b);
        }
    }
    Ok(out)
}

/// Parses Parquet bytes into record batches.
pub fn read_parquet_bytes(path: &Path, bytes: bytes::Bytes) -> Result<Vec<RecordBatch>> {
    read_parquet_columns(path, bytes, None)
}

/// Parses the named columns (all when `None`) of Parquet bytes into record batches.
pub fn read_parquet_columns(
    path: &Path,
    bytes: bytes::Bytes,
    columns: Option<&[&str]>,
) -> Result<Vec<RecordBatch>> {
    parquet_batches(path, bytes, columns, 8192)?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::artifact(path, e))
}

/// The named columns (all when `None`) of Parquet bytes, decoded `batch_rows` rows at a time as
/// the iterator is advanced: memory follows one batch, not the file.
pub fn parquet_batches<T: parquet::file::reader::ChunkReader + 'static>(
    path: &Path,
    bytes: T,
    columns: Option<&[&str]>,
    batch_rows: usize,
) -> Result<ParquetRecordBatchReader> {
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(|e| Error::artifact(path, e))?;
    let builder = match columns {
        Some(cols) => {
            let mask = root_mask(path, builder.parquet_schema(), cols)?;
            builder.with_projection(mask)
        }
        None => builder,
    };
    builder
        .with_batch_size(batch_rows.max(1))
        .build()
        .map_err(|e| Error::artifact(path, e))
}

/// Encodes batches as one Parquet file in memory.
pub fn encode_parquet(schema: SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let props = writer_properties(false);
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, schema, Some(props))
        .map_err(|e| Error::Invalid(e.to_string()))?;
    for b in batches {
        w.write(b).map_err(|e| Error::Invalid(e.to_string()))?;
    }
    w.close().map_err(|e| Error::Invalid(e.to_string()))?;
    Ok(buf)
}

/// A projection of the named top-level columns.
pub fn root_mask(
    path: &Path,
    schema: &parquet::schema::types::SchemaDescriptor,
    cols: &[&str],
) -> Result<ProjectionMask> {
    let fields = schema.root_schema().get_fields();
    let mut indices = Vec::with_capacity(cols.len());
    for c in cols {
        let i = fields
            .iter()
            .position(|f| f.name() == *c)
            .ok_or_else(|| Error::artifact(path, format!("no column `{c}`")))?;
        indices.push(i);
    }
    Ok(ProjectionMask::roots(schema, indices))
}

/// Rows per Parquet row group: a streamed file holds at most this many rows' pages in memory.
pub const ROW_GROUP_ROWS: usize = 65536;

/// Encoded bytes per Parquet row group, the other bound: a writer holds about this much of a large
/// repository's pages in memory, and a reader one row group's column chunks. Measured at 457
/// repositories against 4 MiB: chunk stage peak 52 → 47 MB.
pub const ROW_GROUP_BYTES: usize = 1 << 20;

/// The zstd level of the Parquet files of the tables that take it ([`crate::artifact::Table::zstd`]).
/// Against Snappy (the codec of earlier releases, whose files are still read), level 1 writes
/// chunks and file texts about a third smaller and `scope_members` several times smaller
/// (docs/revisions.md, "Output size").
pub const ZSTD_LEVEL: i32 = 1;

/// The Parquet settings of every artifact file: zstd or Snappy, and the row group bounds.
pub fn writer_properties(zstd: bool) -> WriterProperties {
    let compression = if zstd {
        Compression::ZSTD(parquet::basic::ZstdLevel::try_new(ZSTD_LEVEL).expect("a valid level"))
    } else {
        Compression::SNAPPY
    };
    WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .build()
}

/// The given rows (ascending, each below `total`) of a Parquet file, decoding only `columns` and
/// the pages that hold those rows: the file is mapped, so a lookup costs what it asks for, not the
/// file's size. The file must not change while mapped (artifacts and cache parts are only ever
/// written under a temporary name and renamed).
pub fn read_parquet_rows(
    p: &Path,
    rows: &[u32],
    total: usize,
    columns: &[&str],
) -> Result<Vec<RecordBatch>> {
    use parquet::arrow::arrow_reader::{ArrowReaderOptions, RowSelection};
    use parquet::file::metadata::PageIndexPolicy;
    let file = std::fs::File::open(p).at(p)?;
    // SAFETY: see above; a file removed while mapped stays valid until unmapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(p, e))?;
    let bytes = bytes::Bytes::from_owner(map);
    let bad = |e: parquet::errors::ParquetError| Error::artifact(p, e);
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(
        bytes,
        ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional),
    )
    .map_err(bad)?;
    let mask = root_mask(p, builder.parquet_schema(), columns)?;
    let ranges = rows.iter().map(|&r| r as usize..r as usize + 1);
    let selection = RowSelection::from_consecutive_ranges(ranges, total);
    let reader = builder
        .with_projection(mask)
        .with_row_selection(selection)
        .build()
        .map_err(bad)?;
    reader
        .map(|b| b.map_err(|e| Error::artifact(p, e)))
        .collect()
}
