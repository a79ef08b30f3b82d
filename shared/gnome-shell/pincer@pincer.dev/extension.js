// pincer's GNOME Shell extension (GNOME 42 to 44): windows for pincer-agent on Wayland,
// where GNOME Shell refuses its own window list (Introspect.GetWindows) to other programs.
// It exports dev.pincer.Shell.Windows at /dev/pincer/Shell on the session bus:
// - List() returns the top-level windows, bottom to top, as JSON;
// - Apply(id, op, x, y, width, height) activates, closes, minimizes, maximizes, restores
//   or moves and resizes (op "geometry") window `id`, and returns whether it exists.
// Any program of the session can already drive input through Mutter's remote-desktop
// API; this adds nothing beyond the windows. In a desktop pincer started for itself
// (PINCER_DESKTOP set), it also closes the overview GNOME Shell opens at startup, as an
// agent expects the desktop, not the overview, when its task begins; and it gives new
// windows the focus, as a person's launch from the shell does (apps started by a program
// carry no activation token, so GNOME leaves them unfocused, and the click that focuses
// such a window was seen not to reach it).
'use strict';

const { Gio, GLib, Meta } = imports.gi;
const Main = imports.ui.main;

const PATH = '/dev/pincer/Shell';
const NAME = 'dev.pincer.Shell';
const IFACE = `<node>
  <interface name="dev.pincer.Shell.Windows">
    <method name="List">
      <arg type="s" direction="out" name="windows"/>
    </method>
    <method name="Apply">
      <arg type="t" direction="in" name="id"/>
      <arg type="s" direction="in" name="op"/>
      <arg type="i" direction="in" name="x"/>
      <arg type="i" direction="in" name="y"/>
      <arg type="i" direction="in" name="width"/>
      <arg type="i" direction="in" name="height"/>
      <arg type="b" direction="out" name="found"/>
    </method>
  </interface>
</node>`;

// Windows a person would call windows: not menus, tooltips, docks or the desktop.
const TOP_LEVEL = [
    Meta.WindowType.NORMAL,
    Meta.WindowType.DIALOG,
    Meta.WindowType.MODAL_DIALOG,
    Meta.WindowType.UTILITY,
];

function windows() {
    return global.get_window_actors()
        .map(actor => actor.meta_window)
        .filter(w => w && TOP_LEVEL.includes(w.get_window_type()));
}

function rect(r) {
    return { x: r.x, y: r.y, width: r.width, height: r.height };
}

class Windows {
    List() {
        return JSON.stringify(windows().map(w => ({
            id: w.get_id(),
            title: w.get_title() || '',
            pid: w.get_pid() > 0 ? w.get_pid() : null,
            class: w.get_wm_class(),
            instance: w.get_wm_class_instance(),
            frame: rect(w.get_frame_rect()),
            buffer: rect(w.get_buffer_rect()),
            wayland: w.get_client_type() === Meta.WindowClientType.WAYLAND,
            focused: w.has_focus(),
            minimized: w.minimized,
            maximized: w.get_maximized() === Meta.MaximizeFlags.BOTH,
        })));
    }

    Apply(id, op, x, y, width, height) {
        const w = windows().find(w => w.get_id() === id);
        if (!w)
            return false;
        const now = global.get_current_time();
        switch (op) {
        case 'activate':
            if (w.minimized)
                w.unminimize();
            w.activate(now);
            break;
        case 'close':
            w.delete(now);
            break;
        case 'minimize':
            w.minimize();
            break;
        case 'maximize':
            w.maximize(Meta.MaximizeFlags.BOTH);
            break;
        case 'restore':
            if (w.minimized)
                w.unminimize();
            if (w.get_maximized())
                w.unmaximize(Meta.MaximizeFlags.BOTH);
            break;
        case 'geometry':
            if (w.get_maximized())
                w.unmaximize(Meta.MaximizeFlags.BOTH);
            w.move_resize_frame(true, x, y, width, height);
            break;
        default:
            throw new Error(`unknown operation ${op}`);
        }
        return true;
    }
}

let exported = null;
let owner = 0;
let created = 0;

function init() {
}

function enable() {
    if (GLib.getenv('PINCER_DESKTOP')) {
        if (Main.layoutManager._startingUp)
            Main.layoutManager.connect('startup-complete', () => Main.overview.hide());
        else
            Main.overview.hide();
        created = global.display.connect('window-created', (_display, w) => {
            if (!TOP_LEVEL.includes(w.get_window_type()))
                return;
            GLib.idle_add(GLib.PRIORITY_DEFAULT, () => {
                if (!w.minimized)
                    w.activate(global.get_current_time());
                return GLib.SOURCE_REMOVE;
            });
        });
    }
    exported = Gio.DBusExportedObject.wrapJSObject(IFACE, new Windows());
    exported.export(Gio.DBus.session, PATH);
    owner = Gio.bus_own_name_on_connection(Gio.DBus.session, NAME,
        Gio.BusNameOwnerFlags.NONE, null, null);
}

function disable() {
    if (created)
        global.display.disconnect(created);
    created = 0;
    Gio.bus_unown_name(owner);
    exported.unexport();
    exported = null;
    owner = 0;
}
