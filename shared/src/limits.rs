//! Hard limits on every length that crosses the wire. A peer that exceeds one gets a typed
//! `TooLarge` answer; nothing is allocated before a length is checked against its limit.

/// Largest handshake message, either direction.
pub const MAX_HELLO: u32 = 64 * 1024;
/// Largest request header (the postcard part, not the bulk body).
pub const MAX_REQUEST_HEADER: u32 = 1024 * 1024;
/// Largest response header. UI trees of big apps and batches with inline files live here.
pub const MAX_RESPONSE_HEADER: u32 = 128 * 1024 * 1024;
/// Largest bulk body a host may upload (write file).
pub const MAX_UPLOAD: u64 = 2 * 1024 * 1024 * 1024;
/// Largest bulk body a guest sends (screenshot, file read).
pub const MAX_DOWNLOAD: u64 = 4 * 1024 * 1024 * 1024;
/// Largest file content returned inline by a probe (in a `Batch` or `Probe::ReadFile`).
pub const MAX_INLINE_FILE: u64 = 16 * 1024 * 1024;
/// Most probes in one batch. Together, a batch's replies carry at most 120 MiB of file and
/// command output inline; a probe past that is answered `TooLarge` on its own.
pub const MAX_BATCH: usize = 1024;
/// Most characters in one `TypeText` action.
pub const MAX_TYPE_TEXT: usize = 64 * 1024;
/// Most entries a directory listing returns.
pub const MAX_DIR_ENTRIES: usize = 100_000;
/// Largest combined stdout+stderr an exec may return.
pub const MAX_EXEC_OUTPUT: u64 = 64 * 1024 * 1024;
/// Longest exec timeout a host may ask for.
pub const MAX_EXEC_TIMEOUT_MS: u64 = 24 * 3600 * 1000;
/// Most nodes a UI tree may hold.
pub const MAX_TREE_NODES: u32 = 200_000;
/// Most levels below a UI tree's root that a decoder accepts (guests walk at most 256).
/// Decoding, dropping and rendering a tree recurse once a level: a peer that sent a million
/// levels would otherwise overflow the stack.
pub const MAX_TREE_DEPTH: u32 = 300;
/// Largest screenshot edge in pixels (width or height), requested or produced.
pub const MAX_IMAGE_EDGE: u32 = 16_384;
/// Largest clipboard text set or returned.
pub const MAX_CLIPBOARD_TEXT: usize = 16 * 1024 * 1024;
/// Most frames per second a video stream may ask for.
pub const MAX_VIDEO_FPS: u32 = 60;
/// Longest a video stream may run before the guest ends it (a host may stop it sooner).
pub const MAX_VIDEO_DURATION_MS: u64 = 24 * 3600 * 1000;
/// Most video streams a guest serves at once; one more is answered `Busy`.
pub const MAX_VIDEO_STREAMS: usize = 4;
/// Most input-event streams a guest serves at once; one more is answered `Busy`.
pub const MAX_INPUT_STREAMS: usize = 4;
/// Most input events in one batch of an input stream.
pub const MAX_INPUT_BATCH: usize = 1024;
