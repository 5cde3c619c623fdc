//! `ri-batch serve`: the query service over HTTP (axum). `GET /health`, `/search`, `/commits`, `/answer`,
//! and `POST /reload`, which swaps in the run as it is now on disk; loopback unless allowed
//! otherwise, bounded queries and time per request, JSON errors.

use super::Run;
use crate::config::Retriever;
use crate::error::{Error, Result};
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Longest query text accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 2048;
/// Most hits one search returns.
pub const MAX_K: usize = 100;
/// Largest budget an answer over the service may ask for (a bound on one request's work, below
/// [`crate::config::Budget::MAX`]).
pub const MAX_BUDGET: u32 = 32_768;
/// Time one request may take before it is answered with 503.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to send a request's headers (a connection that sends a byte now and then is
/// closed, not held).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections held at once; more wait in the listen queue. An idle connection costs a socket
/// and a few KiB, not a thread: the work is bounded by [`BLOCKING_THREADS`] and
/// [`REQUEST_TIMEOUT`], so clients that connect and send nothing do not keep others waiting.
pub const MAX_CONNECTIONS: usize = 1024;
/// Largest request body accepted (the endpoints take none but `/reload`'s empty one); a larger
/// one is read and dropped (up to [`MAX_DRAINED_BYTES`]) and answered 413.
pub const MAX_BODY_BYTES: usize = 4096;
/// Most of an oversized body read before the 413 is sent, so that the client reads the answer
/// instead of a reset connection.
pub const MAX_DRAINED_BYTES: usize = 64 << 20;
/// Threads for the blocking query work (searches, answers): a bound, not a pool per request.
pub const BLOCKING_THREADS: usize = 8;

/// What the handlers share: where the run comes from, and the run now served.
pub struct Shared {
    target: PathBuf,
    run: RwLock<Arc<Run>>,
    loaded: RwLock<Instant>,
    reloads: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub fn new(target: PathBuf) -> Result<Arc<Shared>> {
        let run = Run::open(&target)?;
        Ok(Arc::new(Shared {
            target,
            run: RwLock::new(Arc::new(run)),
            loaded: RwLock::new(Instant::now()),
            reloads: Default::default(),
        }))
    }
    fn current(&self) -> Arc<Run> {
        self.run.read().expect("no poisoned lock").clone()
    }
}

/// A JSON error with its status.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError(StatusCode::BAD_REQUEST, r.body_text())
    }
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, msg.into())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitParams {
    q: String,
    repo: Option<String>,
    k: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchParams {
    q: String,
    repo: Option<String>,
    k: Option<usize>,
    retriever: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerParams {
    q: String,
    repo: Option<String>,
    budget: Option<String>,
    variant: Option<String>,
}

fn check_query(q: &str) -> std::result::Result<(), ApiError> {
    if q.trim().is_empty() {
        return Err(bad("q is empty"));
    }
    if q.len() > MAX_QUERY_BYTES {
        return Err(bad(format!("q is longer than {MAX_QUERY_BYTES} bytes")));
    }
    Ok(())
}

/// Runs blocking query work off the async workers, within the request time limit.
/// The number of hits asked for (10 by default), within 1..=[`MAX_K`].
fn check_k(k: Option<usize>) -> std::result::Result<usize, ApiError> {
    match k.unwrap_or(10) {
        k @ 1..=MAX_K => Ok(k),
        _ => Err(bad(format!("k must be within 1..={MAX_K}"))),
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> std::result::Result<T, ApiError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, tokio::task::spawn_blocking(work)).await {
        Err(_) => Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the request took over {} s", REQUEST_TIMEOUT.as_secs()),
        )),
        Ok(Err(e)) => Err(ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        Ok(Ok(Err(Error::Invalid(msg)))) => Err(bad(msg)),
        Ok(Ok(Err(e))) => Err(ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        Ok(Ok(Ok(v))) => Ok(v),
    }
}

async fn health(State(s): State<Arc<Shared>>) -> Json<serde_json::Value> {
    let run = s.current();
    Json(json!({
        "status": "ok",
        "pipeline": run.plan.name,
        "repos": run.plan.repos.len(),
        "reloads": s.reloads.load(std::sync::atomic::Ordering::Relaxed),
        "loaded_s_ago": s.loaded.read().expect("no poisoned lock").elapsed().as_secs(),
    }))
}

async fn search(
    State(s): State<Arc<Shared>>,
    params: std::result::Result<Query<SearchParams>, QueryRejection>,
) -> std::result::Result<Json<serde_json::Value>, ApiError> {
    let Query(p) = params?;
    check_query(&p.q)?;
    let k = check_k(p.k)?;
    let retriever = match p.retriever.as_deref() {
        None | Some("bm25") => Retriever::Bm25,
        Some("dense") => Retriever::Dense,
        Some("hybrid") => Retriever::Hybrid,
        Some(r) => {
            return Err(bad(format!(
                "unknown retriever `{r}`: bm25, dense or hybrid"
            )))
        }
    };
    let run = s.current();
    let hits = blocking(move || run.search(&p.q, p.repo.as_deref(), k, retriever)).await?;
    Ok(Json(json!({ "hits": hits })))
}

async fn commits(
    State(s): State<Arc<Shared>>,
    params: std::result::Result<Query<CommitParams>, QueryRejection>,
) -> std::result::Result<Json<serde_json::Value>, ApiError> {
    let Query(p) = params?;
    check_query(&p.q)?;
    let k = check_k(p.k)?;
    let run = s.current();
    let hits = blocking(move || run.commits(&p.q, p.repo.as_deref(), k)).await?;
    Ok(Json(json!({ "hits": hits })))
}

async fn answer(
    State(s): State<Arc<Shared>>,
    params: std::result::Result<Query<AnswerParams>, QueryRejection>,
) -> std::result::Result<Json<super::Answer>, ApiError> {
    let Query(p) = params?;
    check_query(&p.q)?;
    let budget = p
        .budget
        .as_deref()
        .map(|b| b.parse::<crate::config::Budget>())
        .transpose()
        .map_err(|why| bad(format!("budget: {why}")))?;
    if budget.is_some_and(|b| b.tokens() > MAX_BUDGET) {
        return Err(bad(format!("budget must be within 1..={MAX_BUDGET}")));
    }
    let run = s.current();
    let a =
        blocking(move || run.answer(&p.q, p.repo.as_deref(), budget, p.variant.as_deref())).await?;
    Ok(Json(a))
}

/// Opens the run as it is on disk now and swaps it in; requests in flight keep the old one.
async fn reload(
    State(s): State<Arc<Shared>>,
) -> std::result::Result<Json<serde_json::Value>, ApiError> {
    let target = s.target.clone();
    let run = blocking(move || Run::open(&target)).await?;
    *s.run.write().expect("no poisoned lock") = Arc::new(run);
    *s.loaded.write().expect("no poisoned lock") = Instant::now();
    let n = s.reloads.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    Ok(Json(json!({ "status": "reloaded", "reloads": n })))
}

async fn not_found() -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        "no such endpoint: /health, /search, /commits, /answer, /reload".into(),
    )
}

/// Refuses a request whose body is over [`MAX_BODY_BYTES`] with 413 (the body read and dropped
/// first, so the client sees the status); a smaller body is passed on as it came.
async fn limit_body(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> std::result::Result<Response, Response> {
    use futures::StreamExt;
    let (parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let (mut kept, mut seen) = (Vec::new(), 0usize);
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { break };
        seen += chunk.len();
        if seen <= MAX_BODY_BYTES {
            kept.extend_from_slice(&chunk);
        } else if seen > MAX_DRAINED_BYTES {
            break;
        }
    }
    if seen > MAX_BODY_BYTES {
        let mut r = ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is over {MAX_BODY_BYTES} bytes; the endpoints take none"),
        )
        .into_response();
        r.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return Err(r);
    }
    let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(kept));
    Ok(next.run(req).await)
}

/// Refuses a request whose query string does not decode to UTF-8 (`%ff%fe`): a lossy decoding
/// would search for replacement characters and answer 200.
async fn utf8_query(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> std::result::Result<Response, ApiError> {
    if let Some(q) = req.uri().query() {
        for pair in q.split('&') {
            let plain = pair.replace('+', " ");
            if percent_encoding::percent_decode_str(&plain)
                .decode_utf8()
                .is_err()
            {
                return Err(bad("the query string is not UTF-8 once percent-decoded"));
            }
        }
    }
    Ok(next.run(req).await)
}

/// The service's routes.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/search", get(search))
        .route("/commits", get(commits))
        .route("/answer", get(answer))
        .route("/reload", post(reload))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(utf8_query))
        .layer(axum::middleware::from_fn(limit_body))
        .with_state(shared)
}

/// Serves `target` (a pipeline file or an output directory) on `addr` until stopped. A
/// non-loopback address needs `allow_remote`. Prints `listening on http://<addr>` once bound.
pub fn serve(target: PathBuf, addr: SocketAddr, allow_remote: bool) -> Result<()> {
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(Error::Invalid(format!(
            "{addr} is not a loopback address: the service has no authentication; pass \
             --allow-remote to bind it anyway"
        )));
    }
    let shared = Shared::new(target)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()
        .map_err(|e| Error::Invalid(format!("starting the runtime: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Invalid(format!("binding {addr}: {e}")))?;
        let bound = listener
            .local_addr()
            .map_err(|e| Error::Invalid(format!("binding {addr}: {e}")))?;
        println!("listening on http://{bound}");
        accept(listener, router(shared)).await;
        Ok(())
    })
}

/// Serves connections from `listener`: at most [`MAX_CONNECTIONS`] at once, each closed when its
/// client takes over [`HEADER_TIMEOUT`] to send a request's headers. Memory freed by finished
/// requests goes back to the system once they are done with.
async fn accept(listener: tokio::net::TcpListener, app: Router) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = http.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
            // The last connection out hands the memory its requests freed back.
            crate::memory::release_free();
        });
    }
}
