//! A platform for the core's own tests: a 320x240 screen that a test can freeze the way a
//! stopped display server blocks every call, and no other capability. The Linux agent's
//! tests run the core on real X servers.

use crate::confine::Confinement;
use crate::encode::{Frame, FrameEncoder, PixelFormat};
use crate::guest::Config;
use crate::platform::{Lacking, Platform, Screen};
use pincer_shared::WireError;
use pincer_shared::identity::Token;
use pincer_shared::message::capability;
use pincer_shared::observe::{Rect, ScreenInfo, ScreenshotMeta, ScreenshotRequest};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The test platform; its clones share one screen freeze.
#[derive(Debug, Default, Clone)]
pub(crate) struct Fake {
    freeze: Arc<Freeze>,
}

impl Fake {
    /// Freezes (`true`) or thaws every screen of this platform.
    pub(crate) fn freeze(&self, frozen: bool) {
        *self
            .freeze
            .frozen
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = frozen;
        self.freeze.thawed.notify_all();
    }
}

#[derive(Debug, Default)]
struct Freeze {
    frozen: Mutex<bool>,
    thawed: Condvar,
}

impl Freeze {
    /// Blocks while frozen.
    fn pass(&self) {
        let frozen = self.frozen.lock().unwrap_or_else(PoisonError::into_inner);
        drop(
            self.thawed
                .wait_while(frozen, |frozen| *frozen)
                .unwrap_or_else(PoisonError::into_inner),
        );
    }
}

/// A black 320x240 screen.
#[derive(Debug)]
pub(crate) struct FakeScreen {
    freeze: Arc<Freeze>,
}

const WIDTH: u32 = 320;
const HEIGHT: u32 = 240;

impl Screen for FakeScreen {
    fn info(&mut self) -> Result<ScreenInfo, WireError> {
        self.freeze.pass();
        Ok(ScreenInfo {
            width: WIDTH,
            height: HEIGHT,
            monitors: vec![Rect::new(0, 0, WIDTH, HEIGHT)],
            capture: "test".into(),
        })
    }

    fn capture(
        &mut self,
        req: &ScreenshotRequest,
        encoder: &mut FrameEncoder,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
        self.freeze.pass();
        let source = crate::encode::source_rect(req.region, WIDTH, HEIGHT)?;
        let pixels = vec![0; source.width as usize * source.height as usize * 4];
        let frame = Frame::new(
            &pixels,
            source.width,
            source.height,
            source.width as usize * 4,
            PixelFormat::Bgrx,
        )?;
        encoder.screenshot(frame, source, Duration::ZERO, req)
    }
}

impl Platform for Fake {
    type Input = Lacking;
    type Screen = FakeScreen;
    type Damage = Lacking;
    type InputLog = Lacking;
    type Windows = Lacking;
    type Clipboard = Lacking;
    type Accessibility = Lacking;
    type Settings = Lacking;
    type Device = Lacking;

    // The core's tests need no platform of their own; the handshake names one it knows.
    const NAME: pincer_shared::Platform = pincer_shared::Platform::Linux;
    const SANDBOXED_TOOLS: bool = true;
    const CAPABILITIES: &'static [&'static str] = &[capability::SCREENSHOT, capability::PROBE];

    fn os(&self) -> String {
        "test".into()
    }

    fn input(&self) -> Lacking {
        Lacking
    }

    fn screen(&self) -> FakeScreen {
        FakeScreen {
            freeze: self.freeze.clone(),
        }
    }

    fn damage(&self) -> Lacking {
        Lacking
    }

    fn input_log(&self) -> Lacking {
        Lacking
    }

    fn windows(&self) -> Lacking {
        Lacking
    }

    fn clipboard(&self) -> Lacking {
        Lacking
    }

    fn accessibility(&self) -> Lacking {
        Lacking
    }

    fn settings(&self) -> Lacking {
        Lacking
    }
    fn device(&self) -> Lacking {
        Lacking
    }
}

/// A guest configuration whose state is somewhere else.
pub(crate) fn config(read_only: bool) -> Config {
    Config {
        name: "test".into(),
        token: Token::generate(),
        read_only,
        allow_tools: false,
        confinement: Arc::new(Confinement::normal(std::path::Path::new("/nonexistent"))),
        process_session: None,
    }
}

/// Polls `f` every 50 ms until it returns `Some` or `timeout` passes.
pub(crate) fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
