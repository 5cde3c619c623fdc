//! `ri-batch sql`: registers every committed artifact table of an output directory (local, or
//! `s3://bucket/prefix` on object storage) with
//! DataFusion (one table per artifact, over exactly the files the manifests list) and prints query
//! results as a table, CSV or JSON. Each statement runs within [`Limits`] (memory, time, plan
//! size, generated values): one that passes them is an error, never a crash or a hang.

mod limits;

pub use limits::Limits;

use crate::artifact::RemoteUrl;
use crate::artifact::{FileEntry, FileFormat as StoredFormat, Store};
use crate::error::{because, Cause, Error, Result};
use arrow::array::RecordBatch;
use datafusion::datasource::file_format::arrow::ArrowFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::SessionContext;
use object_store::{ObjectStore, ObjectStoreExt};
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
        .thread_stack_size(256 << 20)
        .enable_all()
        .build()
        .map_err(|e| Error::sql(because("cannot start the query runtime", e)))
}

/// Whether a table is stored as Arrow IPC files.
fn is_ipc(files: &[FileEntry]) -> bool {
    files.iter().all(|f| f.format() == StoredFormat::ArrowIpc)
}

fn df_err(e: impl Into<Cause>) -> Error {
    Error::sql(e)
}

/// Where the tables are: a local output directory, or one on S3-compatible object storage
/// (`s3://bucket/prefix`, read in place through DataFusion's object store registry).
enum Source {
    Local(Store),
    Remote {
        url: RemoteUrl,
        store: Arc<dyn ObjectStore>,
    },
}

impl Source {
    fn open(dir: &Path) -> Result<Source> {
        match RemoteUrl::parse(&dir.to_string_lossy()) {
            None => Ok(Source::Local(Store::new(dir))),
            Some(Err(why)) => Err(Error::Invalid(why)),
            Some(Ok(url)) => {
                let store = crate::artifact::remote::object_store(&url.bucket)?;
                Ok(Source::Remote { url, store })
            }
        }
    }

    fn name(&self) -> String {
        match self {
            Source::Local(store) => store.root().display().to_string(),
            Source::Remote { url, .. } => url.to_string(),
        }
    }

    /// The committed tables and their files; an error when nothing is committed yet. Remote
    /// files are checked here to be there with their manifest's size.
    async fn committed(&self) -> Result<BTreeMap<String, Vec<FileEntry>>> {
        let tables = match self {
            Source::Local(store) => store.tables()?,
            Source::Remote { url, store } => {
                let mut out: BTreeMap<String, Vec<FileEntry>> = BTreeMap::new();
                for m in crate::artifact::remote::committed(store.as_ref(), url).await? {
                    for f in m.files {
                        out.entry(f.table.clone()).or_default().push(f);
                    }
                }
                out
            }
        };
        if tables.is_empty() {
            return Err(Error::sql(format!(
                "{}: no committed artifacts (no stage manifest found); run the pipeline first",
                self.name()
            )));
        }
        Ok(tables)
    }

    /// The tables of `tables` this source cannot read: over object storage, those stored as
    /// Arrow IPC files (the memory-mapped BM25 index), which DataFusion reads only from local
    /// files. They are removed from `tables` and returned.
    fn unreadable(&self, tables: &mut BTreeMap<String, Vec<FileEntry>>) -> Vec<String> {
        if matches!(self, Source::Local(_)) {
            return Vec::new();
        }
        let ipc: Vec<String> = tables
            .iter()
            .filter(|(_, files)| is_ipc(files))
            .map(|(t, _)| t.clone())
            .collect();
        tables.retain(|t, _| !ipc.contains(t));
        ipc
    }

    /// Checks each local file against its manifest entry: its size, and with `checksum` its
    /// SHA-256 (remote files were checked by size when listed).
    fn verify(&self, tables: &BTreeMap<String, Vec<FileEntry>>, checksum: bool) -> Result<()> {
        use rayon::prelude::*;
        if let Source::Local(store) = self {
            let files: Vec<&FileEntry> = tables.values().flatten().collect();
            files
                .par_iter()
                .try_for_each(|f| store.verify(f, checksum).map(|_| ()))?;
        }
        Ok(())
    }

    /// For a remote source, a temporary local copy of every file of `tables`, each checked
    /// against its manifest's SHA-256 as it arrives: a changed object is an error naming it.
    async fn checked_copy(
        &self,
        tables: &BTreeMap<String, Vec<FileEntry>>,
    ) -> Result<Option<tempfile::TempDir>> {
        let Source::Remote { url, store } = self else {
            return Ok(None);
        };
        let dir = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
        for f in tables.values().flatten() {
            let object = url.join(&f.path);
            let key = object_store::path::Path::from(object.prefix.as_str());
            let bytes = store
                .get(&key)
                .await
                .map_err(df_err)?
                .bytes()
                .await
                .map_err(df_err)?;
            if crate::artifact::sha256_hex(&bytes) != f.sha256 {
                return Err(Error::remote(
                    object.to_string(),
                    format!(
                        "changed: its checksum is not the one its manifest ({}) lists",
                        f.table
                    ),
                ));
            }
            let p = dir.path().join(&f.path);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            std::fs::write(&p, &bytes).map_err(|e| Error::io(&p, e))?;
        }
        Ok(Some(dir))
    }

    fn url(&self, f: &FileEntry) -> Result<ListingTableUrl> {
        match self {
            Source::Local(store) => {
                let p = store.path_of(f)?;
                let abs = std::path::absolute(&p).map_err(|e| Error::io(&p, e))?;
                ListingTableUrl::parse(abs.to_string_lossy()).map_err(df_err)
            }
            Source::Remote { url, .. } => {
                ListingTableUrl::parse(url.join(&f.path).to_string()).map_err(df_err)
            }
        }
    }

    /// A DataFusion context with `tables` registered, each over exactly its committed files,
    /// whose operators share a memory pool of `memory_bytes` and whose generating functions are
    /// bounded.
    async fn context(
        &self,
        tables: &BTreeMap<String, Vec<FileEntry>>,
        memory_bytes: usize,
    ) -> Result<SessionContext> {
        let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
            .with_memory_limit(memory_bytes, 1.0)
            .build_arc()
            .map_err(df_err)?;
        let ctx = SessionContext::new_with_config_rt(Default::default(), runtime);
        limits::bound_functions(&ctx);
        if let Source::Remote { url, store } = self {
            let bucket = url::Url::parse(&format!("s3://{}", url.bucket)).map_err(df_err)?;
            ctx.register_object_store(&bucket, store.clone());
        }
        for (name, files) in tables {
            let urls = files
                .iter()
                .map(|f| self.url(f))
                .collect::<Result<Vec<_>>>()?;
            // Tables stored as Arrow IPC (the memory-mapped BM25 index) are read as such.
            let (format, ext): (Arc<dyn FileFormat>, &str) = if is_ipc(files) {
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
}

/// The longest statement `sql` plans, in bytes.
pub const MAX_STATEMENT_BYTES: usize = 1 << 20;

/// The deepest expression nesting `sql` plans (`1+1+…` nests one level a term): planning walks
/// expressions recursively, and a deeper one would overflow the stack.
pub const MAX_EXPRESSION_DEPTH: usize = 256;

/// Refuses a statement over [`MAX_STATEMENT_BYTES`] or nested deeper than
/// [`MAX_EXPRESSION_DEPTH`], before it is planned.
fn check_bounds(query: &str, statement: &datafusion::sql::parser::Statement) -> Result<()> {
    use datafusion::sql::sqlparser::ast::{Expr, Visit, Visitor};
    use std::ops::ControlFlow;
    if query.len() > MAX_STATEMENT_BYTES {
        return Err(Error::sql(format!(
            "the statement is {} bytes; at most {MAX_STATEMENT_BYTES} are planned",
            query.len()
        )));
    }
    struct Depth(usize);
    impl Visitor for Depth {
        type Break = ();
        fn pre_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
            self.0 += 1;
            if self.0 > MAX_EXPRESSION_DEPTH {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
        fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<()> {
            self.0 -= 1;
            ControlFlow::Continue(())
        }
    }
    let deep = match statement {
        datafusion::sql::parser::Statement::Statement(s) => s.visit(&mut Depth(0)).is_break(),
        _ => false,
    };
    if deep {
        return Err(Error::sql(format!(
            "an expression nests more than {MAX_EXPRESSION_DEPTH} levels deep; write it with fewer nested terms"
        )));
    }
    Ok(())
}

/// Runs `query` over the tables of `dir` (a local output directory or `s3://bucket/prefix`). Only
/// the tables the query names are opened, and every file of theirs is first checked against its
/// manifest checksum, as the stages and `report` do: a changed file is an error, never a silently
/// different answer. Objects on S3 are fetched, checked and queried from a temporary copy.
pub fn query(dir: &Path, query: &str) -> Result<Vec<RecordBatch>> {
    query_within(dir, query, Limits::default())
}

/// [`query`] within `limits`: past its memory, time or size bounds the statement fails with an
/// error that says which; a failure inside the engine is an error too.
pub fn query_within(dir: &Path, query: &str, limits: Limits) -> Result<Vec<RecordBatch>> {
    let (dir, query) = (dir.to_path_buf(), query.to_string());
    limits::guarded(limits.timeout, move || {
        let rt = runtime()?;
        let out = rt.block_on(run_query(&dir, &query, limits));
        rt.shutdown_background();
        out
    })
}

async fn run_query(dir: &Path, query: &str, limits: Limits) -> Result<Vec<RecordBatch>> {
    {
        if query.len() > MAX_STATEMENT_BYTES {
            return Err(Error::sql(format!(
                "the statement is {} bytes; at most {MAX_STATEMENT_BYTES} are planned",
                query.len()
            )));
        }
        // The tables the query names, found before any file is opened: a changed file must
        // not be read at all, not even its footer for the schema.
        limits::check_set_operations(query)?;
        let state = SessionContext::new().state();
        let dialect = state.config().options().sql_parser.dialect;
        let statement = state.sql_to_statement(query, &dialect).map_err(df_err)?;
        check_bounds(query, &statement)?;
        let mut named = BTreeSet::new();
        for r in state.resolve_table_references(&statement).map_err(df_err)? {
            named.insert(r.table().to_string());
        }
        let source = Source::open(dir)?;
        let mut tables = source.committed().await?;
        tables.retain(|t, _| named.contains(t));
        if let Some(t) = source.unreadable(&mut tables).first() {
            return Err(Error::sql(format!(
                "table `{t}` is stored as Arrow IPC (the memory-mapped BM25 index) and is read from local files only: query the run's mirror (`ri-batch sql <mirror_dir>/<bucket>/<prefix>`)"
            )));
        }
        // Remote objects are checked whole before DataFusion reads any of them.
        let copy = source.checked_copy(&tables).await?;
        let source = match &copy {
            Some(dir) => Source::Local(Store::new(dir.path())),
            None => source,
        };
        source.verify(&tables, true)?;
        let ctx = source.context(&tables, limits.memory_bytes).await?;
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
    }
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
        let source = Source::open(dir)?;
        let mut tables = source.committed().await?;
        let unreadable = source.unreadable(&mut tables);
        source.verify(&tables, false)?;
        let ctx = source
            .context(&tables, Limits::default().memory_bytes)
            .await?;
        let mut out = String::new();
        for t in unreadable {
            out.push_str(&format!(
                "{t}\n  (Arrow IPC: read from local files only, query the run's mirror)\n"
            ));
        }
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
