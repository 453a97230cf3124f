//! Pyroscope's HTTP ingest API: `POST /ingest?name=SERVICE{labels}&from=&until=&format=pprof
//! &sampleRate=&spyName=`, the gzipped pprof in a multipart form's `profile` field.
use bytes::Bytes;

use super::{Labels, Request, Window};
use crate::render::pprof;

/// The multipart boundary: a string no gzip stream is checked against, long enough to be
/// vanishingly unlikely inside one.
const BOUNDARY: &str = "profiler-agent-4b1e9d0c7f3a52e8";

pub(super) fn requests(url: &str, window: &Window, labels: &Labels) -> Vec<Request> {
    window
        .services
        .iter()
        .filter_map(|(service, recording)| {
            let mut profile = Vec::new();
            pprof::write(recording, &mut profile).ok()?;
            let meta = &recording.meta;
            let from = meta.start_unix_ns / 1_000_000_000;
            let until = (meta.start_unix_ns + meta.duration_ns).div_ceil(1_000_000_000).max(from + 1);
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("name", &name(service, labels))
                .append_pair("from", &from.to_string())
                .append_pair("until", &until.to_string())
                .append_pair("format", "pprof")
                .append_pair("sampleRate", &meta.frequency_hz.to_string())
                .append_pair("spyName", "profiler")
                .finish();
            let uri = format!("{url}/ingest?{query}").parse().ok()?;
            Some(Request::Http {
                uri,
                content_type: format!("multipart/form-data; boundary={BOUNDARY}"),
                body: multipart(&profile),
            })
        })
        .collect()
}

/// `SERVICE{key=value,...}`: the application name with the labels after it (values cleaned of
/// the delimiters already).
fn name(service: &str, labels: &Labels) -> String {
    let pairs: Vec<String> =
        labels.of(service).into_iter().skip(1).map(|(k, v)| format!("{k}={v}")).collect();
    format!("{service}{{{}}}", pairs.join(","))
}

fn multipart(profile: &[u8]) -> Bytes {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"profile\"; filename=\"profile.pprof\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(profile);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    body.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{export::service::Host, model::tests::fixture};

    #[test]
    fn one_request_per_service_with_name_and_times() {
        let labels = Labels {
            host: Host { name: "web-1".into(), kernel_release: "6.18.0".into() },
            user: vec![("env".into(), "prod".into())],
        };
        let mut recording = fixture();
        recording.meta.start_unix_ns = 1_700_000_000_500_000_000;
        recording.meta.duration_ns = 15_000_000_000;
        let window = Window { services: vec![("api".into(), recording.clone()), ("db".into(), recording)] };
        let requests = requests("http://pyroscope:4040", &window, &labels);
        assert_eq!(requests.len(), 2);
        let Request::Http { uri, content_type, body } = &requests[0] else { panic!("an HTTP request") };
        assert_eq!(uri.path(), "/ingest");
        let query: Vec<(String, String)> =
            form_urlencoded::parse(uri.query().unwrap().as_bytes()).into_owned().collect();
        let get = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        assert_eq!(get("name"), Some("api{host_name=web-1,kernel_release=6.18.0,env=prod}"));
        assert_eq!((get("from"), get("until")), (Some("1700000000"), Some("1700000016")));
        assert_eq!(
            (get("format"), get("sampleRate"), get("spyName")),
            (Some("pprof"), Some("99"), Some("profiler"))
        );
        assert!(content_type.ends_with(BOUNDARY));
        assert!(body.starts_with(format!("--{BOUNDARY}\r\n").as_bytes()));
        assert!(body.ends_with(format!("\r\n--{BOUNDARY}--\r\n").as_bytes()));
    }
}
