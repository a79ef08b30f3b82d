//! `pincer-screencast NODE`: reads a screen cast's PipeWire stream (node `NODE`, which a
//! compositor announced) and writes each frame to stdout for pincer-agent, which starts it
//! on GNOME's Wayland route. A program of its own so that pincer-agent does not link
//! libpipewire, which machines without a Wayland desktop (VM images, servers) lack.
//!
//! Each frame is a header of six little-endian u32 (the magic `PCF1`, width, height,
//! stride, format: 0 BGRx, 1 RGBx, 2 a layout pincer does not read; and the byte length)
//! and its pixels. The program exits when stdout closes, and with a message on stderr and
//! status 1 when the stream fails or the compositor ends it.

use pipewire as pw;
use pw::spa;
use std::io::Write as _;

/// The header's first word.
const MAGIC: u32 = u32::from_le_bytes(*b"PCF1");

fn main() {
    let Some(node) = std::env::args().nth(1).and_then(|n| n.parse::<u32>().ok()) else {
        eprintln!("usage: pincer-screencast NODE (the screen cast's PipeWire node id)");
        std::process::exit(2);
    };
    match run(node) {
        Ok(()) => {}
        Err(why) => {
            eprintln!("{why}");
            std::process::exit(1);
        }
    }
}

/// Reads node `node` until stdout closes or the stream ends.
fn run(node: u32) -> Result<(), String> {
    pw::init();
    let fail = |what: &str, e: pw::Error| format!("{what}: {e}");
    let mainloop = pw::main_loop::MainLoopRc::new(None).map_err(|e| fail("main loop", e))?;
    let context = pw::context::ContextRc::new(&mainloop, None).map_err(|e| fail("context", e))?;
    let core = context
        .connect_rc(None)
        .map_err(|e| fail("connecting to the PipeWire daemon", e))?;
    let stream = pw::stream::StreamBox::new(
        &core,
        "pincer-agent",
        pw::properties::properties! {
            *pw::keys::MEDIA_TYPE => "Video",
            *pw::keys::MEDIA_CATEGORY => "Capture",
            *pw::keys::MEDIA_ROLE => "Screen",
        },
    )
    .map_err(|e| fail("stream", e))?;

    let ended = std::rc::Rc::new(std::cell::RefCell::new(None::<String>));
    let on_state = {
        let mainloop = mainloop.clone();
        let ended = ended.clone();
        move |why: String| {
            ended.borrow_mut().get_or_insert(why);
            mainloop.quit();
        }
    };
    let on_frame = on_state.clone();
    let mut out = std::io::stdout().lock();
    let _listener = stream
        .add_local_listener_with_user_data(spa::param::video::VideoInfoRaw::default())
        .state_changed(move |_, _, _, new| match new {
            pw::stream::StreamState::Error(why) => {
                on_state(format!("the screen cast failed: {why}"))
            }
            pw::stream::StreamState::Unconnected => {
                on_state("the compositor ended the screen cast".to_owned());
            }
            _ => {}
        })
        .param_changed(|_, info, id, param| {
            if let Some(param) = param
                && id == spa::param::ParamType::Format.as_raw()
            {
                let _ = info.parse(param);
            }
        })
        .process(move |stream, info| {
            // Only the newest buffer matters: older ones queued behind it are returned.
            let mut newest = None;
            while let Some(buffer) = stream.dequeue_buffer() {
                newest = Some(buffer);
            }
            let Some(mut buffer) = newest else { return };
            let Some(data) = buffer.datas_mut().first_mut() else {
                return;
            };
            let (offset, size, stride) = {
                let chunk = data.chunk();
                (
                    chunk.offset() as usize,
                    chunk.size() as usize,
                    chunk.stride(),
                )
            };
            let Some(pixels) = data.data().and_then(|b| b.get(offset..offset + size)) else {
                return;
            };
            if pixels.is_empty() {
                return;
            }
            let size = info.size();
            let row = size.width * 4;
            let stride = u32::try_from(stride)
                .ok()
                .filter(|&s| s >= row)
                .unwrap_or(row);
            let header = [
                MAGIC,
                size.width,
                size.height,
                stride,
                format_code(info.format()),
                pixels.len() as u32,
            ];
            let header: Vec<u8> = header.iter().flat_map(|w| w.to_le_bytes()).collect();
            let written = out
                .write_all(&header)
                .and_then(|()| out.write_all(pixels))
                .and_then(|()| out.flush());
            if written.is_err() {
                // pincer-agent stopped reading: it is gone or done with us.
                on_frame(String::new());
            }
        })
        .register()
        .map_err(|e| fail("stream listener", e))?;

    let format = format_param();
    let mut params = [spa::pod::Pod::from_bytes(&format).ok_or("a malformed format")?];
    stream
        .connect(
            spa::utils::Direction::Input,
            Some(node),
            pw::stream::StreamFlags::AUTOCONNECT | pw::stream::StreamFlags::MAP_BUFFERS,
            &mut params,
        )
        .map_err(|e| fail("connecting the stream", e))?;
    mainloop.run();
    match ended.borrow_mut().take() {
        Some(why) if !why.is_empty() => Err(why),
        _ => Ok(()),
    }
}

/// The header's format code: the 4-byte layouts pincer's encoder reads.
fn format_code(format: spa::param::video::VideoFormat) -> u32 {
    use spa::param::video::VideoFormat as F;
    match format {
        F::BGRx | F::BGRA => 0,
        F::RGBx | F::RGBA => 1,
        _ => 2,
    }
}

/// The formats asked for: raw video in a 4-byte layout the encoder reads, any size and rate.
fn format_param() -> Vec<u8> {
    use spa::param::format::{FormatProperties, MediaSubtype, MediaType};
    use spa::param::video::VideoFormat;
    use spa::utils::{Fraction, Rectangle};
    let object = spa::pod::object!(
        spa::utils::SpaTypes::ObjectParamFormat,
        spa::param::ParamType::EnumFormat,
        spa::pod::property!(FormatProperties::MediaType, Id, MediaType::Video),
        spa::pod::property!(FormatProperties::MediaSubtype, Id, MediaSubtype::Raw),
        spa::pod::property!(
            FormatProperties::VideoFormat,
            Choice,
            Enum,
            Id,
            VideoFormat::BGRx,
            VideoFormat::BGRx,
            VideoFormat::BGRA,
            VideoFormat::RGBx,
            VideoFormat::RGBA
        ),
        spa::pod::property!(
            FormatProperties::VideoSize,
            Choice,
            Range,
            Rectangle,
            Rectangle {
                width: 1280,
                height: 800
            },
            Rectangle {
                width: 1,
                height: 1
            },
            Rectangle {
                width: 16384,
                height: 16384
            }
        ),
        spa::pod::property!(
            FormatProperties::VideoFramerate,
            Choice,
            Range,
            Fraction,
            Fraction { num: 60, denom: 1 },
            Fraction { num: 0, denom: 1 },
            Fraction {
                num: 1000,
                denom: 1
            }
        ),
    );
    spa::pod::serialize::PodSerializer::serialize(
        std::io::Cursor::new(Vec::new()),
        &spa::pod::Value::Object(object),
    )
    .map(|(cursor, _)| cursor.into_inner())
    .unwrap_or_default()
}
