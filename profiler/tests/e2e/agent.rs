//! End to end, as root: `profiler agent` profiling split.c (built without frame pointers,
//! 60/30/10 between hot_a, hot_b and hot_c) and pushing to receivers built here: an OTLP
//! profiles gRPC server from the official definitions (the `opentelemetry-proto` crate's
//! generated server), and a server following Pyroscope's documented HTTP ingest API. Checked:
//! the shares, the labels, the times and the period; a backend down then up, a spool too small,
//! SIGTERM; and `go tool pprof -raw` on the files of `--output-dir`.

use std::{
    collections::BTreeMap,
    io::Read as _,
    net::TcpListener,
    path::PathBuf,
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::common::*;
use http_body_util::{BodyExt as _, Empty};
use hyper::{
    Method, Request, Response,
    body::{Bytes, Incoming},
    header::CONTENT_TYPE,
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::{
    collector::profiles::v1development::{
        ExportProfilesServiceRequest, ExportProfilesServiceResponse,
        profiles_service_server::{ProfilesService, ProfilesServiceServer},
    },
    common::v1::any_value::Value,
};
use prost::Message as _;

const HZ: &str = "499";
const SERVICE: &str = "split-service";

fn split_without_frame_pointers() -> PathBuf {
    build_workload("split.c", "split-agent", "gcc", &["-O2", "-g", "-fomit-frame-pointer"])
}

fn unix_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// `profiler agent -p PID -F 499 --service-name split-service --label env=test <extra>`,
/// started and sampling.
fn start_agent(pid: u32, extra: &[&str]) -> Started {
    let pid = pid.to_string();
    let mut args = vec!["agent", "-p", &pid, "-F", HZ, "--service-name", SERVICE, "--label", "env=test"];
    args.extend(extra);
    start_profiler(&args)
}

/// Waits for the agent to end, successfully: its stderr.
fn finish(agent: Started) -> String {
    let (status, stderr) = agent.wait();
    assert!(status.success());
    stderr
}

/// Asserts that `samples` are what `cpu` of a busy thread gives at 499 Hz, within ±30%: every
/// moment the workload ran while sampled was sampled, and no more.
fn assert_samples_for(samples: i64, cpu: Duration) {
    let expected = cpu.as_secs_f64() * 499.0;
    eprintln!("{samples} samples for {cpu:?} of CPU time: {expected:.0} expected");
    assert!((samples as f64 - expected).abs() <= 0.3 * expected, "{samples} samples, {expected:.0} expected");
}

/// The windows and profiles the agent's summary says it handed over.
fn handed_over(stderr: &str) -> (u64, u64) {
    let line = stderr.lines().find(|l| l.contains(" profiles handed to the exporter")).expect("the summary");
    let numbers: Vec<u64> =
        line.split_whitespace().filter_map(|w| w.trim_end_matches(',').parse().ok()).collect();
    (numbers[0], numbers[1])
}

/// Samples by leaf function, summed.
fn leaf_shares(by_leaf: &BTreeMap<String, i64>) -> BTreeMap<String, f64> {
    let hot: i64 = ["hot_a", "hot_b", "hot_c"].iter().map(|f| by_leaf.get(*f).copied().unwrap_or(0)).sum();
    assert!(hot > 0, "no samples in the hot functions: {by_leaf:?}");
    let total: i64 = by_leaf.values().sum();
    assert!(hot as f64 >= 0.9 * total as f64, "most samples should be in the hot functions: {by_leaf:?}");
    ["hot_a", "hot_b", "hot_c"]
        .iter()
        .map(|f| (f.to_string(), 100.0 * by_leaf.get(*f).copied().unwrap_or(0) as f64 / hot as f64))
        .collect()
}

fn assert_split_shares(by_leaf: &BTreeMap<String, i64>) {
    let shares = leaf_shares(by_leaf);
    eprintln!("shares {shares:?}");
    for (leaf, expected) in [("hot_a", 60.0), ("hot_b", 30.0), ("hot_c", 10.0)] {
        assert!((shares[leaf] - expected).abs() <= 5.0, "{leaf}: {:.1}% vs {expected}% ± 5", shares[leaf]);
    }
}

/// An OTLP profiles receiver: keeps every request.
#[derive(Clone, Default)]
struct OtlpReceiver(Arc<Mutex<Vec<ExportProfilesServiceRequest>>>);

#[tonic::async_trait]
impl ProfilesService for OtlpReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportProfilesServiceRequest>,
    ) -> Result<tonic::Response<ExportProfilesServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportProfilesServiceResponse::default()))
    }
}

/// Serves `receiver` over gRPC on a free local port, on a thread of its own; its URL. (The
/// agent connects lazily and retries: the server may come up a moment after.)
fn serve_otlp(receiver: OtlpReceiver) -> String {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            tonic::transport::Server::builder()
                .add_service(ProfilesServiceServer::new(receiver))
                .serve(address)
                .await
                .unwrap();
        });
    });
    format!("http://{address}")
}

#[test]
fn otlp_windows_carry_the_split_labels_times_and_period() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split_without_frame_pointers(), &["0"]);
    let receiver = OtlpReceiver::default();
    let url = serve_otlp(receiver.clone());
    let started = unix_now_ns();
    let agent = start_agent(workload.pid(), &["--otlp", &url, "--interval", "2", "-d", "5"]);
    // From when it samples to when it has ended: a little more than it sampled.
    let cpu_before = cpu_time(workload.pid());
    let (windows, profiles) = handed_over(&finish(agent));
    let cpu = cpu_time(workload.pid()) - cpu_before;
    let ended = unix_now_ns();
    let requests = receiver.0.lock().unwrap().clone();
    assert!(requests.len() >= 2, "{} requests", requests.len());
    assert_eq!(requests.len() as u64, windows.min(profiles), "every window with samples arrived");
    // The windows follow one another, without gap or overlap (their starts are on the wall
    // clock, their lengths on the monotonic one, which it may be slewed against).
    let spans: Vec<(u64, u64)> = requests
        .iter()
        .map(|r| &r.resource_profiles[0].scope_profiles[0].profiles[0])
        .map(|p| (p.time_unix_nano, p.duration_nano))
        .collect();
    for pair in spans.windows(2) {
        let ((start, length), (next, _)) = (pair[0], pair[1]);
        assert!((start + length).abs_diff(next) <= length / 10, "windows {pair:?} do not meet");
    }
    let mut by_leaf: BTreeMap<String, i64> = BTreeMap::new();
    for request in &requests {
        let dictionary = request.dictionary.as_ref().expect("a dictionary");
        let s = |i: i32| dictionary.string_table[i as usize].as_str();
        assert_eq!(request.resource_profiles.len(), 1, "one service");
        let resource = &request.resource_profiles[0];
        let attributes: BTreeMap<&str, String> = resource
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .map(|kv| {
                let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(Value::StringValue(s)) => s.clone(),
                    other => format!("{other:?}"),
                };
                (kv.key.as_str(), value)
            })
            .collect();
        assert_eq!(attributes["service.name"], SERVICE);
        assert_eq!(attributes["env"], "test");
        assert!(
            !attributes["host.name"].is_empty() && !attributes["os.version"].is_empty(),
            "{attributes:?}"
        );
        let profile = &resource.scope_profiles[0].profiles[0];
        assert!(profile.time_unix_nano >= started - 1_000_000_000 && profile.time_unix_nano <= ended);
        assert!(
            profile.duration_nano > 0 && profile.duration_nano <= 2_500_000_000,
            "{}",
            profile.duration_nano
        );
        assert_eq!(profile.period, 1_000_000_000 / 499);
        let period_type = profile.period_type.as_ref().unwrap();
        assert_eq!((s(period_type.type_strindex), s(period_type.unit_strindex)), ("cpu", "nanoseconds"));
        let sample_type = profile.sample_type.as_ref().unwrap();
        assert_eq!((s(sample_type.type_strindex), s(sample_type.unit_strindex)), ("samples", "count"));
        for sample in &profile.samples {
            let pid = sample.attribute_indices.iter().find_map(|&a| {
                let attribute = &dictionary.attribute_table[a as usize];
                match (s(attribute.key_strindex), attribute.value.as_ref().and_then(|v| v.value.as_ref())) {
                    ("process.pid", Some(Value::IntValue(pid))) => Some(*pid as u32),
                    _ => None,
                }
            });
            assert_eq!(pid, Some(workload.pid()));
            let stack = &dictionary.stack_table[sample.stack_index as usize];
            let leaf = &dictionary.location_table[stack.location_indices[0] as usize];
            let function = &dictionary.function_table[leaf.lines[0].function_index as usize];
            let name = s(function.name_strindex);
            *by_leaf.entry(name.to_owned()).or_default() += sample.values[0];
            if name.starts_with("hot_") {
                let line = leaf.lines[0].line;
                assert!(
                    s(function.filename_strindex).ends_with("/split.c") && line > 0,
                    "{name} at line {line}"
                );
            }
        }
    }
    assert_split_shares(&by_leaf);
    assert_samples_for(by_leaf.values().sum(), cpu);
}

/// What a Pyroscope ingest request brought: its query parameters and its pprof profile.
struct Ingested {
    query: BTreeMap<String, String>,
    profile: profiler::pprof::Profile,
}

/// A server that follows Pyroscope's HTTP ingest API (`POST /ingest?...` with the pprof in a
/// multipart form's `profile` field), on `listener`, on a thread of its own.
fn serve_pyroscope(listener: TcpListener) -> Arc<Mutex<Vec<Ingested>>> {
    let ingested = Arc::new(Mutex::new(Vec::new()));
    let kept = ingested.clone();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let kept = kept.clone();
                let service = service_fn(move |request| ingest(request, kept.clone()));
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
    });
    ingested
}

/// Keeps what one ingest request brought.
async fn ingest(
    request: Request<Incoming>,
    ingested: Arc<Mutex<Vec<Ingested>>>,
) -> Result<Response<Empty<Bytes>>, hyper::Error> {
    let (method, uri) = (request.method(), request.uri());
    assert!(method == Method::POST && uri.path() == "/ingest", "{method} {uri}");
    let query = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()).into_owned().collect();
    let content_type = request.headers()[CONTENT_TYPE].to_str().unwrap();
    let boundary = content_type.split_once("boundary=").unwrap().1.to_owned();
    let body = request.into_body().collect().await?.to_bytes();
    let profile = decode_pprof(multipart_field(&body, &boundary, "profile"));
    ingested.lock().unwrap().push(Ingested { query, profile });
    Ok(Response::new(Empty::new()))
}

/// The content of the form field `name` in a multipart body.
fn multipart_field<'a>(body: &'a [u8], boundary: &str, name: &str) -> &'a [u8] {
    let delimiter = format!("--{boundary}");
    let find = |haystack: &[u8], needle: &[u8]| haystack.windows(needle.len()).position(|w| w == needle);
    let mut rest = body;
    while let Some(start) = find(rest, delimiter.as_bytes()) {
        rest = &rest[start + delimiter.len()..];
        let headers_end = find(rest, b"\r\n\r\n").expect("part headers");
        let headers = String::from_utf8_lossy(&rest[..headers_end]);
        let content = &rest[headers_end + 4..];
        let end = find(content, format!("\r\n{delimiter}").as_bytes()).expect("part end");
        if headers.contains(&format!("name=\"{name}\"")) {
            return &content[..end];
        }
    }
    panic!("no field {name}");
}

fn decode_pprof(gzipped: &[u8]) -> profiler::pprof::Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gzipped).read_to_end(&mut raw).unwrap();
    profiler::pprof::Profile::decode(&*raw).unwrap()
}

/// Samples by leaf function of pprof profiles, and by leaf source line (file, line).
#[allow(clippy::type_complexity)]
fn pprof_leaves(
    profiles: &[&profiler::pprof::Profile],
) -> (BTreeMap<String, i64>, BTreeMap<(String, String, i64), i64>) {
    let mut by_leaf = BTreeMap::new();
    let mut sources = BTreeMap::new();
    for profile in profiles {
        let s = |i: i64| profile.string_table[i as usize].clone();
        for sample in &profile.sample {
            let location = &profile.location[sample.location_id[0] as usize - 1];
            let line = &location.line[0];
            let function = &profile.function[line.function_id as usize - 1];
            *by_leaf.entry(s(function.name)).or_default() += sample.value[0];
            *sources.entry((s(function.name), s(function.filename), line.line)).or_default() +=
                sample.value[0];
        }
    }
    (by_leaf, sources)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn pyroscope_ingest_gets_named_windows_with_clean_names_and_source_lines() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split_without_frame_pointers(), &["0"]);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let ingested = serve_pyroscope(listener);
    let started = unix_now_ns() / 1_000_000_000;
    let agent = start_agent(workload.pid(), &["--pyroscope", &url, "--interval", "2", "-d", "5"]);
    let (_, profiles) = handed_over(&finish(agent));
    let ended = unix_now_ns().div_ceil(1_000_000_000);
    let ingested = ingested.lock().unwrap();
    assert!(ingested.len() >= 2);
    assert_eq!(ingested.len() as u64, profiles);
    for request in ingested.iter() {
        let q = &request.query;
        assert!(q["name"].starts_with(&format!("{SERVICE}{{host_name=")), "{}", q["name"]);
        assert!(q["name"].contains(",kernel_release=") && q["name"].ends_with(",env=test}"), "{}", q["name"]);
        assert_eq!(
            (q["format"].as_str(), q["sampleRate"].as_str(), q["spyName"].as_str()),
            ("pprof", HZ, "profiler")
        );
        let (from, until): (u64, u64) = (q["from"].parse().unwrap(), q["until"].parse().unwrap());
        assert!(
            started <= from + 1 && from < until && until <= ended + 1,
            "{from}..{until} in {started}..{ended}"
        );
        assert_eq!(request.profile.period, 1_000_000_000 / 499);
    }
    let profiles: Vec<&profiler::pprof::Profile> = ingested.iter().map(|i| &i.profile).collect();
    let (by_leaf, sources) = pprof_leaves(&profiles);
    assert!(by_leaf.keys().all(|name| !name.ends_with(']')), "names without suffixes: {by_leaf:?}");
    assert_split_shares(&by_leaf);
    // The hot functions' samples name their lines in split.c.
    let hot = sources.iter().filter(|((name, _, _), _)| name.starts_with("hot_"));
    let (with_line, all) = hot.fold((0, 0), |(with_line, all), ((_, file, line), n)| {
        (with_line + if file.ends_with("/split.c") && *line > 0 { *n } else { 0 }, all + n)
    });
    assert!(with_line as f64 >= 0.99 * all as f64, "hot samples with source lines: {sources:?}");
}

#[test]
fn a_backend_down_for_30_s_gets_every_window_once_up() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split_without_frame_pointers(), &["0"]);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let agent = start_agent(workload.pid(), &["--pyroscope", &url, "--interval", "2", "-d", "40"]);
    std::thread::sleep(Duration::from_secs(30));
    let ingested = serve_pyroscope(TcpListener::bind(("127.0.0.1", port)).unwrap());
    let stderr = finish(agent);
    let (_, profiles) = handed_over(&stderr);
    assert!(profiles >= 18, "{profiles} windows in 40 s");
    assert_eq!(ingested.lock().unwrap().len() as u64, profiles, "every window delivered once");
    let said = |text: &str| stderr.lines().filter(|l| l.contains(text)).count();
    assert_eq!(said("cannot deliver"), 1, "the outage is said once");
    assert_eq!(said("delivering again"), 1, "and the recovery once");
}

#[test]
fn a_tiny_spool_drops_the_oldest_and_says_so() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split_without_frame_pointers(), &["0"]);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    // A few KiB: two or three windows of this workload.
    let spool = "0.005";
    let agent = start_agent(
        workload.pid(),
        &["--pyroscope", &url, "--interval", "1", "-d", "20", "--spool-size", spool],
    );
    std::thread::sleep(Duration::from_secs(12));
    let ingested = serve_pyroscope(TcpListener::bind(("127.0.0.1", port)).unwrap());
    let stderr = finish(agent);
    let (_, profiles) = handed_over(&stderr);
    let delivered = ingested.lock().unwrap().len() as u64;
    let dropped: u64 = stderr
        .lines()
        .find_map(|l| {
            l.split("; ").nth(1)?.strip_suffix(" windows were dropped for room in the spool")?.parse().ok()
        })
        .expect("the number dropped is said");
    eprintln!("{profiles} windows, {delivered} delivered, {dropped} dropped");
    assert!(dropped > 0);
    assert_eq!(delivered + dropped, profiles, "each window delivered or counted as dropped");
    assert_eq!(stderr.lines().filter(|l| l.contains("the spool is full")).count(), 1, "said once");
}

#[test]
fn sigterm_flushes_the_partial_window() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split_without_frame_pointers(), &["0"]);
    let receiver = OtlpReceiver::default();
    let url = serve_otlp(receiver.clone());
    let agent = start_agent(workload.pid(), &["--otlp", &url, "--interval", "60"]);
    let cpu_before = cpu_time(workload.pid());
    wait_for_cpu(workload.pid(), Duration::from_secs(2));
    let cpu = cpu_time(workload.pid()) - cpu_before;
    agent.signal(libc::SIGTERM);
    finish(agent);
    let requests = receiver.0.lock().unwrap();
    assert_eq!(requests.len(), 1, "the partial window");
    let profile = &requests[0].resource_profiles[0].scope_profiles[0].profiles[0];
    assert_samples_for(profile.samples.iter().map(|s| s.values[0]).sum(), cpu);
}

#[test]
fn output_dir_files_read_by_go_tool_pprof_and_retained() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split_without_frame_pointers(), &["0"]);
    let dir = scratch_dir("agent-output-dir");
    let out = dir.join("profiles");
    let agent = start_agent(
        workload.pid(),
        &["--output-dir", out.to_str().unwrap(), "--interval", "1", "-d", "5", "--keep", "3"],
    );
    let (_, profiles) = handed_over(&finish(agent));
    assert!(profiles >= 4);
    let files: Vec<PathBuf> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 3, "--keep 3: {files:?}");
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(&format!("{SERVICE}-")) && name.ends_with(".pb.gz"), "{name}");
        let raw =
            Command::new("go").args(["tool", "pprof", "-raw"]).arg(file).output().expect("run go tool pprof");
        let text = String::from_utf8_lossy(&raw.stdout);
        assert!(raw.status.success(), "go tool pprof: {}", String::from_utf8_lossy(&raw.stderr));
        assert!(text.contains("hot_a") && !text.contains("_[i]"), "{text}");
        assert!(text.contains("split.c:"), "source lines: {text}");
    }
}

/// Every function of each location of a pprof sample's stack, innermost first.
fn pprof_stack<'a>(profile: &'a profiler::pprof::Profile, sample: &profiler::pprof::Sample) -> Vec<&'a str> {
    sample
        .location_id
        .iter()
        .flat_map(|&id| &profile.location[id as usize - 1].line)
        .map(|line| {
            profile.string_table[profile.function[line.function_id as usize - 1].name as usize].as_str()
        })
        .collect()
}

#[test]
fn off_cpu_profiles_beside_the_cpu_ones() {
    if !e2e_enabled() {
        return;
    }
    let workload =
        build_workload("off_cpu.c", "off-cpu-agent", "gcc", &["-O2", "-g", "-fomit-frame-pointer"]);
    let workload = spawn(&workload, &["60"]);
    let out = scratch_dir("agent-off-cpu").join("profiles");
    let seconds = 5.0;
    let agent = start_agent(
        workload.pid(),
        &["--off-cpu", "--output-dir", out.to_str().unwrap(), "--interval", "2", "-d", "5"],
    );
    finish(agent);
    let (mut sleeping_ns, mut with_kernel_ns, mut burning, mut on_cpu) = (0, 0, 0, 0);
    let (mut off_cpu_files, mut cpu_files) = (0, 0);
    for file in std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()) {
        let profile = decode_pprof(&std::fs::read(&file).unwrap());
        let s = |i: i64| profile.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = profile.sample_type.iter().map(|t| (s(t.r#type), s(t.unit))).collect();
        if file.to_string_lossy().contains(&format!("{SERVICE}-off_cpu-")) {
            off_cpu_files += 1;
            assert_eq!(types, [("samples", "count"), ("off_cpu", "nanoseconds")]);
            for sample in &profile.sample {
                let stack = pprof_stack(&profile, sample);
                if stack.contains(&"sleep_inner") {
                    assert!(stack.contains(&"sleeper"), "whole stack: {stack:?}");
                    sleeping_ns += sample.value[1];
                    if stack.contains(&"hrtimer_nanosleep") {
                        with_kernel_ns += sample.value[1];
                    }
                }
            }
        } else {
            cpu_files += 1;
            assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
            for sample in &profile.sample {
                if pprof_stack(&profile, sample).contains(&"burn_inner") {
                    burning += sample.value[0];
                }
                on_cpu += sample.value[0];
            }
        }
    }
    assert!(off_cpu_files >= 2 && cpu_files >= 2, "{off_cpu_files} off-CPU and {cpu_files} CPU files");
    // The sleeper is off the CPU the whole time. The sleep the agent found
    // under way has no kernel frames (its thread was not seen leaving); the others do.
    let slept = sleeping_ns as f64 / 1e9;
    assert!(
        with_kernel_ns as f64 >= 0.95 * sleeping_ns as f64,
        "{with_kernel_ns} of {sleeping_ns} ns with kernel frames"
    );
    assert!(
        (0.85 * seconds..=1.02 * seconds).contains(&slept),
        "the sleeper slept {slept:.2} s in {seconds} s"
    );
    // The burner and the holder both spin all the time (the holder half of it holding the lock).
    assert!(burning as f64 >= 0.3 * on_cpu as f64, "{burning} of {on_cpu} CPU samples in the burner");
}

/// Accepts connections and reads whatever comes, never answering; its URL.
fn serve_silence() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || std::io::copy(&mut stream, &mut std::io::sink()));
        }
    });
    url
}

/// Answers every request with an HTTP 500 whose body says it is 1 GiB long, and writes it until
/// the client hangs up; its URL.
fn serve_endless_error() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || flood(stream));
        }
    });
    url
}

/// Reads one request from `stream`, then answers it with the endless error.
fn flood(stream: std::net::TcpStream) -> std::io::Result<()> {
    let mut reader = std::io::BufReader::new(stream.try_clone()?);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut reader, &mut line)? == 0 {
            return Ok(());
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    std::io::copy(&mut std::io::Read::take(&mut reader, length), &mut std::io::sink())?;
    let mut stream = stream;
    let head = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 1073741824\r\n\r\nflooded ";
    std::io::Write::write_all(&mut stream, head.as_bytes())?;
    let chunk = vec![b'x'; 1 << 16];
    loop {
        std::io::Write::write_all(&mut stream, &chunk)?;
    }
}

#[test]
fn backends_that_hang_or_flood_hold_up_nothing() {
    if !e2e_enabled() {
        return;
    }
    let workload = spawn(&split_without_frame_pointers(), &["0"]);
    let (silent, flooding) = (serve_silence(), serve_endless_error());
    let dir = scratch_dir("agent-hostile-backends");
    let args = ["--pyroscope", &silent, "--otlp-http", &flooding, "--output-dir", dir.to_str().unwrap()];
    let agent = start_agent(workload.pid(), &[&args[..], &["--interval", "1"]].concat());
    let cgroup = MemoryCgroup::new("agent-backends", 512 << 20);
    cgroup.add(agent.pid());
    std::thread::sleep(Duration::from_secs(6));
    let written = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .count();
    let peak = peak_rss(agent.pid());
    let stopping = std::time::Instant::now();
    agent.signal(libc::SIGTERM);
    let stderr = finish(agent);
    let stopped = stopping.elapsed();
    // The flood reached the agent: it read what it says, and no more.
    assert!(stderr.contains("HTTP 500 Internal Server Error: flooded"), "{stderr}");
    assert!(peak < 150 << 20, "peak RSS {} MiB", peak >> 20);
    assert!(written >= 4, "{written} windows in the directory after 6 s of 1 s windows");
    // Both backends get the same flush time, at once, not one after the other.
    let undelivered = stderr.lines().filter(|l| l.contains("not delivered in the")).count();
    assert_eq!(undelivered, 2, "{stderr}");
    assert!(stopped < Duration::from_secs(8), "SIGTERM to exit: {stopped:?}");
}

/// Open descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// Twenty programs of their own (each its own build id) run one after the other under a shell
/// the agent follows, then nothing new for a while: what the agent opened and read for them
/// (their files, blazesym's, their CFI) is let go once they are gone, so its descriptors come
/// back to where they were. The control: while they ran, it held descriptors for several at
/// once, and its windows name their functions.
#[test]
fn modules_unseen_for_a_few_windows_are_let_go() {
    if !e2e_enabled() {
        return;
    }
    let programs: Vec<PathBuf> = (1..=20)
        .map(|variant| {
            let build_id = format!("-Wl,--build-id=0x{variant:040x}");
            build_workload("split.c", &format!("split-churn-{variant}"), "gcc", &["-O2", "-g", &build_id])
        })
        .collect();
    let runs: Vec<String> = programs.iter().map(|program| format!("{} 0.3;", program.display())).collect();
    let script = format!("read go; {} echo done; exec sleep 60", runs.join(" "));
    let mut shell = std::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let dir = scratch_dir("agent-eviction");
    let agent = start_profiler(&[
        "agent",
        "-p",
        &shell.id().to_string(),
        "-F",
        HZ,
        "--interval",
        "1",
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    let before = open_fds(agent.pid());
    std::io::Write::write_all(shell.stdin.as_mut().unwrap(), b"go\n").unwrap();
    let output = shell.stdout.take().unwrap();
    let done = std::thread::spawn(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(output), &mut line).unwrap();
        line
    });
    let mut busy = before;
    while !done.is_finished() {
        busy = busy.max(open_fds(agent.pid()));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(done.join().unwrap(), "done\n");
    // Exited processes are forgotten two seconds on; a margin for windows under way.
    std::thread::sleep(Duration::from_secs(8));
    let after = open_fds(agent.pid());
    agent.signal(libc::SIGTERM);
    let stderr = finish(agent);
    let _ = shell.kill();
    let _ = shell.wait();
    assert!(
        busy >= before + 8,
        "{before} descriptors before, at most {busy} while the programs ran\n{stderr}"
    );
    assert!(after <= before + 4, "{before} descriptors before, {after} once they went unseen\n{stderr}");
    let mut hot = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let Ok(bytes) = std::fs::read(entry.path()) else { continue };
        let Ok(profile) = std::panic::catch_unwind(|| decode_pprof(&bytes)) else { continue };
        hot += profile.string_table.iter().filter(|name| name.starts_with("hot_")).count();
    }
    assert!(hot > 0, "their functions named in the windows");
}

/// Off-CPU time of process `pid` in each `--output-dir` off-CPU profile, in the order written.
fn off_cpu_ns_by_window(dir: &std::path::Path, pid: u32) -> Vec<i64> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.to_string_lossy().contains("-off_cpu-"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|file| {
            let profile = decode_pprof(&std::fs::read(file).unwrap());
            let pid_key = profile.string_table.iter().position(|s| s == "pid").unwrap() as i64;
            profile
                .sample
                .iter()
                .filter(|sample| sample.label.iter().any(|l| l.key == pid_key && l.num == i64::from(pid)))
                .map(|sample| sample.value[1])
                .sum()
        })
        .collect()
}

/// A process that blocks once for 6 s while the agent cuts 1 s windows: its time off the CPU
/// is in each window it spans (about a second each), not all in the one where it ended.
#[test]
fn a_long_block_is_shared_by_the_windows_it_spans() {
    if !e2e_enabled() {
        return;
    }
    let mut shell = std::process::Command::new("sh")
        .args(["-c", "read go; exec sleep 6"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = shell.id();
    let dir = scratch_dir("agent-long-block");
    let agent = start_profiler(&[
        "agent",
        "-p",
        &pid.to_string(),
        "--off-cpu",
        "--interval",
        "1",
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    std::io::Write::write_all(shell.stdin.as_mut().unwrap(), b"go\n").unwrap();
    assert!(shell.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(1500));
    agent.signal(libc::SIGTERM);
    let stderr = finish(agent);
    let windows: Vec<i64> = off_cpu_ns_by_window(&dir, pid).into_iter().filter(|&ns| ns > 0).collect();
    let total: i64 = windows.iter().sum();
    assert!((total - 6_000_000_000).abs() < 300_000_000, "{total} ns in all: {windows:?}\n{stderr}");
    assert!(windows.len() >= 5, "spread over {windows:?}");
    assert!(windows.iter().all(|&ns| ns < 1_500_000_000), "at most a window's length each: {windows:?}");
}
