//! `ri-batch sql`: registers every committed artifact table of an output directory with
//! DataFusion (one table per artifact, over exactly the files the manifests list) and prints query
//! results as a table, CSV or JSON.

use crate::artifact::{FileEntry, FileFormat as StoredFormat, Store};
use crate::error::{Error, Result};
use arrow::array::RecordBatch;
use datafusion::datasource::file_format::arrow::ArrowFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::SessionContext;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

/// Output format of query results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .map_err(|e| Error::Sql(format!("cannot start the query runtime: {e}")))
}

fn df_err(e: impl std::fmt::Display) -> Error {
    Error::Sql(e.to_string())
}

/// The committed tables of `dir` and their files; an error when nothing is committed yet.
fn committed(store: &Store) -> Result<BTreeMap<String, Vec<FileEntry>>> {
    let tables = store.tables()?;
    if tables.is_empty() {
        return Err(Error::Sql(format!(
            "{}: no committed artifacts (no stage manifest found); run the pipeline first",
            store.root().display()
        )));
    }
    Ok(tables)
}

/// A DataFusion context with `tables` registered, each over exactly its committed files (each
/// file's size checked against its manifest here).
async fn context(
    store: &Store,
    tables: &BTreeMap<String, Vec<FileEntry>>,
) -> Result<SessionContext> {
    let ctx = SessionContext::new();
    for (name, files) in tables {
        let urls = files
            .iter()
            .map(|f| {
                let p = store.verify(f, false)?;
                let abs = std::path::absolute(&p).map_err(|e| Error::io(&p, e))?;
                ListingTableUrl::parse(abs.to_string_lossy()).map_err(df_err)
            })
            .collect::<Result<Vec<_>>>()?;
        // Tables stored as Arrow IPC (the memory-mapped BM25 index) are read as such.
        let ipc = files.iter().all(|f| f.format() == StoredFormat::ArrowIpc);
        let (format, ext): (Arc<dyn FileFormat>, &str) = if ipc {
            (Arc::new(ArrowFormat), ".arrow")
        } else {
            (Arc::new(ParquetFormat::default()), ".parquet")
        };
        let options = ListingOptions::new(format).with_file_extension(ext);
        let config = ListingTableConfig::new_with_multi_paths(urls)
            .with_listing_options(options)
            .infer_schema(&ctx.state())
            .await
            .map_err(df_err)?;
        let table = ListingTable::try_new(config).map_err(df_err)?;
        ctx.register_table(name.as_str(), Arc::new(table))
            .map_err(df_err)?;
    }
    Ok(ctx)
}

/// Runs `query` over the tables of `dir`. Only the tables the query names are opened, and every
/// file of theirs is first checked against its manifest checksum, as the stages and `report` do:
/// a changed file is an error, never a silently different answer.
pub fn query(dir: &Path, query: &str) -> Result<Vec<RecordBatch>> {
    runtime()?.block_on(async {
        // The tables the query names, found before any file is opened: a changed file must
        // not be read at all, not even its footer for the schema.
        let state = SessionContext::new().state();
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state.sql_to_statement(query, &dialect).map_err(df_err)?;
        let mut named = BTreeSet::new();
        for r in state.resolve_table_references(&statement).map_err(df_err)? {
            named.insert(r.table().to_string());
        }
        let store = Store::new(dir);
        let mut tables = committed(&store)?;
        tables.retain(|t, _| named.contains(t));
        {
            use rayon::prelude::*;
            let files: Vec<&FileEntry> = tables.values().flatten().collect();
            files
                .par_iter()
                .try_for_each(|f| store.verify(f, true).map(|_| ()))?;
        }
        let ctx = context(&store, &tables).await?;
        // Queries only: no DDL (CREATE EXTERNAL TABLE reads files outside the run), no DML
        // (COPY … TO writes anywhere), no statements that change the session.
        let read_only = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        let df = ctx
            .sql_with_options(query, read_only)
            .await
            .map_err(df_err)?;
        df.collect().await.map_err(df_err)
    })
}

/// Formats batches for printing.
pub fn format(batches: &[RecordBatch], format: Format) -> Result<String> {
    let mut out = Vec::new();
    match format {
        Format::Table => {
            let t = arrow::util::pretty::pretty_format_batches(batches).map_err(df_err)?;
            return Ok(t.to_string());
        }
        Format::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            for b in batches {
                w.write(b).map_err(df_err)?;
            }
        }
        Format::Json => {
            let mut w = arrow::json::ArrayWriter::new(&mut out);
            let refs: Vec<&RecordBatch> = batches.iter().collect();
            w.write_batches(&refs).map_err(df_err)?;
            w.finish().map_err(df_err)?;
        }
    }
    String::from_utf8(out).map_err(df_err)
}

/// Every table and its columns (name and type).
pub fn schema(dir: &Path) -> Result<String> {
    runtime()?.block_on(async {
        let store = Store::new(dir);
        let ctx = context(&store, &committed(&store)?).await?;
        let mut out = String::new();
        let mut names: Vec<String> = ctx
            .catalog("datafusion")
            .and_then(|c| c.schema("public"))
            .map(|s| s.table_names())
            .unwrap_or_default();
        names.sort();
        for name in names {
            let t = ctx.table(name.as_str()).await.map_err(df_err)?;
            out.push_str(&name);
            out.push('\n');
            for f in t.schema().fields() {
                out.push_str(&format!("  {}: {}\n", f.name(), f.data_type()));
            }
        }
        Ok(out)
    })
}
