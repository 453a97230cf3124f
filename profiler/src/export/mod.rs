//! Exporting the windows of a continuous session (`profiler agent`): each window's profiles,
//! one per service, go to a thread of their own, where each destination (Pyroscope, OTLP over
//! gRPC or HTTP, a directory) has a task of its own, so that a slow or absent backend holds up
//! neither sampling nor the other destinations. What a backend cannot take yet waits in a
//! bounded spool, retried with exponential backoff and jitter; when the spool is full the oldest
//! windows go first. Nothing a backend answers is read beyond a few KiB.
mod files;
mod otlp;
mod pyroscope;
pub(crate) mod service;

use std::{collections::VecDeque, path::PathBuf, sync::Arc, thread::JoinHandle, time::Duration};

use anyhow::{Context as _, Result};
use bytes::Bytes;
use bytes::BytesMut;
use http_body_util::{BodyExt as _, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesServiceRequest, profiles_service_client::ProfilesServiceClient,
};
use tokio::{
    sync::{mpsc, watch},
    task::JoinSet,
};

pub(crate) use self::files::Retention;
use self::service::Host;
use crate::model::Recording;

/// Where windows go, and what every profile is labelled with.
#[derive(Clone, Debug, Default)]
pub(crate) struct ExportConfig {
    /// Pyroscope's base URL (`/ingest` is appended).
    pub pyroscope: Option<String>,
    /// An OTLP gRPC endpoint (`ProfilesService/Export`).
    pub otlp_grpc: Option<String>,
    /// An OTLP/HTTP base URL (`/v1development/profiles` is appended).
    pub otlp_http: Option<String>,
    pub output_dir: Option<(PathBuf, Retention)>,
    /// `--label KEY=VALUE`s.
    pub labels: Vec<(String, String)>,
    /// Bytes of undelivered requests kept, over all network destinations.
    pub spool_bytes: usize,
}

/// One window: a recording per service.
#[derive(Debug)]
pub(crate) struct Window {
    pub services: Vec<(String, Recording)>,
}

/// The handle of the delivering thread. Dropping it closes the last window's delivery: the
/// thread tries for at most [`FLUSH_TIME`] more, then says what it could not deliver.
pub(crate) struct Exporter {
    windows: Option<mpsc::Sender<Window>>,
    thread: Option<JoinHandle<()>>,
    /// Windows the thread had no room for (it is behind by [`WINDOWS_QUEUED`] windows).
    refused: u64,
}

/// Windows handed over but not yet taken, by the exporter and by each destination.
const WINDOWS_QUEUED: usize = 8;
/// How long the last windows may take to deliver once sampling stopped, all destinations
/// together.
pub(crate) const FLUSH_TIME: Duration = Duration::from_secs(4);
/// A request's longest wait for its backend, connecting included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// What is read of a backend's answer: the start of an error's body, a gRPC response or its
/// status headers. A backend may send anything, of any length.
const ANSWER_BYTES: usize = 4096;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

impl Exporter {
    pub(crate) fn start(config: ExportConfig) -> Result<Self> {
        let destinations = Destination::all(&config)?;
        let (sender, receiver) = mpsc::channel(WINDOWS_QUEUED);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the exporter's runtime")?;
        let host = Host::this();
        let thread = std::thread::Builder::new()
            .name("exporter".into())
            .spawn(move || runtime.block_on(deliver(destinations, config, host, receiver)))
            .context("cannot start the exporter thread")?;
        Ok(Self { windows: Some(sender), thread: Some(thread), refused: 0 })
    }

    /// Hands a window over, without waiting.
    pub(crate) fn send(&mut self, window: Window) {
        let Some(windows) = &self.windows else { return };
        if windows.try_send(window).is_err() {
            if self.refused == 0 {
                eprintln!(
                    "profiler agent: warning: the exporter is behind; windows are dropped until it catches up"
                );
            }
            self.refused += 1;
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        drop(self.windows.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if self.refused > 0 {
            eprintln!(
                "profiler agent: warning: {} windows were dropped before the exporter took them",
                self.refused
            );
        }
    }
}

/// A request to a backend, kept until delivered.
#[derive(Debug)]
enum Request {
    Http {
        uri: hyper::Uri,
        content_type: String,
        body: Bytes,
    },
    /// The message and its encoded size (measured once: the spool counts it on the way in and
    /// out).
    Grpc {
        request: ExportProfilesServiceRequest,
        size: usize,
    },
}

impl Request {
    fn grpc(request: ExportProfilesServiceRequest) -> Self {
        let size = prost::Message::encoded_len(&request);
        Request::Grpc { request, size }
    }

    fn size(&self) -> usize {
        match self {
            Request::Http { body, .. } => body.len(),
            Request::Grpc { size, .. } => *size,
        }
    }
}

#[derive(Debug)]
enum Destination {
    Pyroscope(String),
    OtlpGrpc(String),
    OtlpHttp(String),
    Directory(files::Directory),
}

impl Destination {
    fn all(config: &ExportConfig) -> Result<Vec<Destination>> {
        let mut all = Vec::new();
        if let Some(url) = &config.pyroscope {
            all.push(Destination::Pyroscope(checked_url(url)?));
        }
        if let Some(url) = &config.otlp_grpc {
            all.push(Destination::OtlpGrpc(checked_url(url)?));
        }
        if let Some(url) = &config.otlp_http {
            all.push(Destination::OtlpHttp(checked_url(url)?));
        }
        if let Some((dir, retention)) = &config.output_dir {
            all.push(Destination::Directory(files::Directory::open(dir, *retention)?));
        }
        Ok(all)
    }

    fn describe(&self) -> String {
        match self {
            Destination::Pyroscope(url) => format!("Pyroscope at {url}"),
            Destination::OtlpGrpc(url) => format!("OTLP (gRPC) at {url}"),
            Destination::OtlpHttp(url) => format!("OTLP (HTTP) at {url}"),
            Destination::Directory(dir) => format!("directory {}", dir.path().display()),
        }
    }
}

/// An http:// URL without its trailing slash (TLS is for a collector or proxy beside the agent).
fn checked_url(url: &str) -> Result<String> {
    let uri: hyper::Uri = url.parse().with_context(|| format!("invalid URL {url:?}"))?;
    anyhow::ensure!(
        uri.scheme_str() == Some("http") && uri.host().is_some(),
        "unsupported URL {url:?}: give http://HOST:PORT (for TLS, send through a local collector or proxy)"
    );
    Ok(url.trim_end_matches('/').to_owned())
}

/// A network destination's requests not yet delivered, and when to try again.
struct Queue {
    destination: Destination,
    pending: VecDeque<Request>,
    bytes: usize,
    retry_at: tokio::time::Instant,
    backoff: Duration,
    /// Failed attempts since the last delivery; the first is said on stderr, and the recovery.
    failures: u64,
    /// Requests dropped for room in the spool, since the last delivery.
    dropped: u64,
}

impl Queue {
    fn new(destination: Destination) -> Self {
        Self {
            destination,
            pending: VecDeque::new(),
            bytes: 0,
            retry_at: tokio::time::Instant::now(),
            backoff: FIRST_BACKOFF,
            failures: 0,
            dropped: 0,
        }
    }

    /// Adds a request, dropping the oldest ones beyond `budget` bytes.
    fn push(&mut self, request: Request, budget: usize) {
        self.bytes += request.size();
        self.pending.push_back(request);
        while self.bytes > budget && self.pending.len() > 1 {
            let oldest = self.pending.pop_front().expect("more than one pending");
            self.bytes -= oldest.size();
            if self.dropped == 0 {
                eprintln!(
                    "profiler agent: warning: {}: the spool is full; dropping the oldest windows",
                    self.destination.describe()
                );
            }
            self.dropped += 1;
        }
    }

    fn due(&self) -> bool {
        !self.pending.is_empty() && self.retry_at <= tokio::time::Instant::now()
    }

    /// Delivers pending requests, oldest first, until one fails (then backs off), none is left,
    /// or the flush time `flush` announces runs out.
    async fn deliver(&mut self, sender: &Sender, flush: &mut watch::Receiver<Option<tokio::time::Instant>>) {
        while let Some(request) = self.pending.front() {
            let attempt = tokio::time::timeout(REQUEST_TIMEOUT, sender.send(&self.destination, request));
            let outcome = tokio::select! {
                outcome = attempt => outcome,
                () = flush_ends(flush) => return self.failed("the flush time ran out"),
            };
            match outcome {
                Ok(Ok(())) => {
                    let delivered = self.pending.pop_front().expect("a front");
                    self.bytes -= delivered.size();
                    self.recovered();
                }
                Ok(Err(err)) => return self.failed(&format!("{err:#}")),
                Err(_) => return self.failed("no answer in time"),
            }
        }
    }

    fn failed(&mut self, error: &str) {
        if self.failures == 0 {
            eprintln!(
                "profiler agent: warning: {}: cannot deliver: {error}; retrying with backoff, windows kept in the spool",
                self.destination.describe()
            );
        }
        self.failures += 1;
        // Jitter: agents of a fleet that lost their backend together do not retry together.
        let jitter = 0.5 + (crate::clock::monotonic_ns() % 1000) as f64 / 1000.0;
        self.retry_at = tokio::time::Instant::now() + self.backoff.mul_f64(jitter);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    fn recovered(&mut self) {
        if self.failures > 0 {
            let dropped = match self.dropped {
                0 => String::new(),
                n => format!("; {n} windows were dropped for room in the spool"),
            };
            eprintln!(
                "profiler agent: {}: delivering again after {} failed attempts{dropped}",
                self.destination.describe(),
                self.failures
            );
        }
        (self.failures, self.dropped, self.backoff) = (0, 0, FIRST_BACKOFF);
    }
}

/// The connections requests go through: one HTTP client, and a gRPC channel per endpoint.
struct Sender {
    http: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    grpc: Vec<(String, ProfilesServiceClient<tonic::transport::Channel>)>,
}

impl Sender {
    fn new(destinations: &[Destination]) -> Result<Self> {
        let mut grpc = Vec::new();
        for destination in destinations {
            if let Destination::OtlpGrpc(url) = destination {
                let endpoint = tonic::transport::Endpoint::from_shared(url.clone())
                    .with_context(|| format!("invalid OTLP endpoint {url:?}"))?
                    .connect_timeout(REQUEST_TIMEOUT)
                    .timeout(REQUEST_TIMEOUT)
                    .http2_max_header_list_size(ANSWER_BYTES as u32);
                let client = ProfilesServiceClient::new(endpoint.connect_lazy())
                    .max_decoding_message_size(ANSWER_BYTES);
                grpc.push((url.clone(), client));
            }
        }
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        connector.set_connect_timeout(Some(REQUEST_TIMEOUT));
        Ok(Self { http: Client::builder(TokioExecutor::new()).build(connector), grpc })
    }

    async fn send(&self, destination: &Destination, request: &Request) -> Result<()> {
        match request {
            Request::Http { uri, content_type, body } => {
                let request = hyper::Request::post(uri.clone())
                    .header(hyper::header::CONTENT_TYPE, content_type)
                    .body(Full::new(body.clone()))?;
                let response = self.http.request(request).await?;
                let status = response.status();
                if !status.is_success() {
                    let body = answer_start(response.into_body()).await;
                    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                    anyhow::bail!("HTTP {status}: {}", crate::model::printable(text.trim()));
                }
                // The rest of a success's body is dropped unread, with its connection.
                Ok(())
            }
            Request::Grpc { request, .. } => {
                let Destination::OtlpGrpc(url) = destination else {
                    unreachable!("gRPC requests go to gRPC")
                };
                let mut client =
                    self.grpc.iter().find(|(u, _)| u == url).map(|(_, c)| c.clone()).context("no channel")?;
                let response = client.export(request.clone()).await.map_err(|status| {
                    anyhow::anyhow!("gRPC {:?}: {}", status.code(), crate::model::printable(status.message()))
                })?;
                if let Some(partial) = response.into_inner().partial_success
                    && partial.rejected_profiles > 0
                {
                    anyhow::bail!(
                        "{} profiles rejected: {}",
                        partial.rejected_profiles,
                        partial.error_message
                    );
                }
                Ok(())
            }
        }
    }
}

/// The exporter thread: hands each window to every destination's task, until the session
/// closes the channel; then gives them all the same [`FLUSH_TIME`] to deliver what they hold.
async fn deliver(
    destinations: Vec<Destination>,
    config: ExportConfig,
    host: Host,
    mut windows: mpsc::Receiver<Window>,
) {
    let sender = match Sender::new(&destinations) {
        Ok(sender) => Arc::new(sender),
        Err(err) => return eprintln!("profiler agent: error: {err:#}"),
    };
    let labels = Arc::new(Labels { host, user: config.labels.clone() });
    let network = destinations.iter().filter(|d| !matches!(d, Destination::Directory(_))).count();
    let budget = config.spool_bytes / network.max(1);
    let (flush, flush_told) = watch::channel(None);
    let mut feeds = Vec::new();
    let mut tasks = JoinSet::new();
    for destination in destinations {
        let (feed, taken) = mpsc::channel(WINDOWS_QUEUED);
        feeds.push(Feed { windows: feed, name: destination.describe(), dropped: 0 });
        match destination {
            Destination::Directory(dir) => tasks.spawn(write_windows(dir, taken)),
            network => {
                let (queue, sender, labels) = (Queue::new(network), sender.clone(), labels.clone());
                tasks.spawn(send_windows(queue, taken, sender, labels, budget, flush_told.clone()))
            }
        };
    }
    while let Some(window) = windows.recv().await {
        let window = Arc::new(window);
        for feed in &mut feeds {
            feed.offer(&window);
        }
    }
    let _ = flush.send(Some(tokio::time::Instant::now() + FLUSH_TIME));
    for feed in feeds {
        feed.close();
    }
    while tasks.join_next().await.is_some() {}
}

/// A destination's task, as the exporter hands it windows.
struct Feed {
    windows: mpsc::Sender<Arc<Window>>,
    name: String,
    /// Windows it was too far behind to take.
    dropped: u64,
}

impl Feed {
    /// Hands `window` over, without waiting: a destination that is behind loses it, and no other
    /// waits for it.
    fn offer(&mut self, window: &Arc<Window>) {
        if self.windows.try_send(window.clone()).is_err() {
            if self.dropped == 0 {
                eprintln!(
                    "profiler agent: warning: {}: behind; windows are dropped until it catches up",
                    self.name
                );
            }
            self.dropped += 1;
        }
    }

    fn close(self) {
        if self.dropped > 0 {
            eprintln!(
                "profiler agent: warning: {}: {} windows dropped while it was behind",
                self.name, self.dropped
            );
        }
    }
}

/// A directory's task: writes each window, off the exporter thread (disk writes block).
async fn write_windows(mut dir: files::Directory, mut windows: mpsc::Receiver<Arc<Window>>) {
    while let Some(window) = windows.recv().await {
        let write = tokio::task::spawn_blocking(move || {
            dir.write(&window);
            dir
        });
        match write.await {
            Ok(written) => dir = written,
            Err(_) => return,
        }
    }
}

/// A network destination's task: encodes each window into its requests and delivers them,
/// retrying with backoff; once the windows end, tries what is left until the flush time runs out.
async fn send_windows(
    mut queue: Queue,
    mut windows: mpsc::Receiver<Arc<Window>>,
    sender: Arc<Sender>,
    labels: Arc<Labels>,
    budget: usize,
    mut flush: watch::Receiver<Option<tokio::time::Instant>>,
) {
    loop {
        let retry_at = (!queue.pending.is_empty()).then_some(queue.retry_at);
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            window = windows.recv() => match window {
                Some(window) => {
                    for request in requests(&queue.destination, &window, &labels) {
                        queue.push(request, budget);
                    }
                }
                None => break,
            },
            () = retry => {}
        }
        if queue.due() {
            queue.deliver(&sender, &mut flush).await;
        }
    }
    let deadline = flush.borrow().unwrap_or_else(tokio::time::Instant::now);
    while !queue.pending.is_empty() && tokio::time::Instant::now() < deadline {
        queue.deliver(&sender, &mut flush).await;
        let pause =
            Duration::from_millis(200).min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        tokio::time::sleep(pause).await;
    }
    if !queue.pending.is_empty() {
        eprintln!(
            "profiler agent: warning: {}: {} requests not delivered in the {} s given at exit",
            queue.destination.describe(),
            queue.pending.len(),
            FLUSH_TIME.as_secs()
        );
    }
}

/// Returns once the flush time, when announced, has run out.
async fn flush_ends(flush: &mut watch::Receiver<Option<tokio::time::Instant>>) {
    loop {
        let announced = *flush.borrow_and_update();
        if let Some(deadline) = announced {
            return tokio::time::sleep_until(deadline).await;
        }
        if flush.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// The first [`ANSWER_BYTES`] of a body, whatever length it claims: the rest is never read.
async fn answer_start(mut body: hyper::body::Incoming) -> Bytes {
    let mut start = BytesMut::new();
    while start.len() < ANSWER_BYTES {
        let Some(Ok(frame)) = body.frame().await else { break };
        if let Ok(data) = frame.into_data() {
            start.extend_from_slice(&data[..data.len().min(ANSWER_BYTES - start.len())]);
        }
    }
    start.freeze()
}

/// The labels of every profile: the host's, and the user's.
pub(crate) struct Labels {
    pub host: Host,
    pub user: Vec<(String, String)>,
}

impl Labels {
    /// Every label of a service's profile, `service_name` first.
    pub(crate) fn of(&self, service: &str) -> Vec<(String, String)> {
        let mut labels = vec![
            ("service_name".to_owned(), service.to_owned()),
            ("host_name".to_owned(), self.host.name.clone()),
            ("kernel_release".to_owned(), self.host.kernel_release.clone()),
        ];
        labels.extend(self.user.iter().cloned());
        labels
    }
}

fn requests(destination: &Destination, window: &Window, labels: &Labels) -> Vec<Request> {
    match destination {
        Destination::Pyroscope(url) => pyroscope::requests(url, window, labels),
        Destination::OtlpGrpc(_) => vec![Request::grpc(otlp::request(window, labels))],
        Destination::OtlpHttp(url) => vec![otlp::http_request(url, window, labels)],
        Destination::Directory(_) => Vec::new(),
    }
}
