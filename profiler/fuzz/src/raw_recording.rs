//! Raw recordings: any bytes read to a recording or an error, never a panic; whatever reads
//! renders in every format.

use profiler::{Filter, Format, RenderOptions, raw, render};

/// Runs one input: panics when what must hold for any input does not.
pub fn check(data: &[u8]) {
    // The whole file format, and the protobuf payload alone (past the gzip checksum).
    let recordings = [raw::read(&mut &data[..]), raw::decode_payload(data, data.len() as u64)];
    for recording in recordings.into_iter().flatten() {
        let recording =
            recording.filtered(&Filter { no_kernel: data.len().is_multiple_of(2), ..Default::default() });
        for format in
            [Format::Folded, Format::Pprof, Format::Speedscope, Format::Raw, Format::Svg, Format::LeakReport]
        {
            render(format, &recording, &RenderOptions::default(), &mut std::io::sink()).unwrap();
        }
    }
}
