//! Environment sets: the environments one task runs on, by role. From `--set ROLE=ENV,...`
//! (names in the envs file), from `--vm IMAGE` (VMs brought up for the run), or, with
//! neither, local desktops brought up for the run (the embedded default). What a launch
//! made is listed in [`Made`], which its guard (`launch::Environments`) stops afterwards.
//! Roles played by pincer VMs are reset before every task.

use super::RunError;
use crate::desktop::{self, DesktopError, DesktopOptions};
use crate::env::registry::Registry;
use crate::env::{Deadlines, Environment};
use crate::task::Task;
use pincer_shared::Platform;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// The environments of one worker.
#[derive(Debug, Clone)]
pub struct EnvSet {
    /// Name for logs and results ("s0").
    pub name: String,
    /// Environments by role.
    pub envs: BTreeMap<String, Arc<Environment>>,
    /// Platforms by role.
    pub platforms: BTreeMap<String, Platform>,
    /// The roles played by pincer VMs, with the VM's name: reset before every task.
    pub vms: BTreeMap<String, String>,
}

impl EnvSet {
    /// Whether this set can run the task (it has every role with the right platform).
    pub fn fits(&self, task: &Task) -> bool {
        task.envs
            .iter()
            .all(|(role, need)| self.platforms.get(role) == Some(&need.platform))
    }
}

/// What a launch started for itself (local desktops, VMs), stopped via [`Made::stop`].
/// Clones share the lists, so a signal handler can stop what the launch made.
#[derive(Debug, Default, Clone)]
pub(super) struct Made {
    desktops: Arc<Mutex<Vec<String>>>,
    vms: Arc<Mutex<Vec<String>>>,
}

impl Made {
    fn push(list: &Mutex<Vec<String>>, name: String) {
        list.lock().unwrap_or_else(|e| e.into_inner()).push(name);
    }

    fn take(list: &Mutex<Vec<String>>) -> Vec<String> {
        std::mem::take(&mut *list.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether nothing is left to stop.
    pub(super) fn is_empty(&self) -> bool {
        let empty = |l: &Mutex<Vec<String>>| l.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
        empty(&self.desktops) && empty(&self.vms)
    }

    /// The local desktops made, by name.
    pub(super) fn desktops(&self) -> Vec<String> {
        self.desktops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops every desktop and VM made for the launch.
    pub(super) async fn stop(&self, reg: &Registry) {
        let desktops = Self::take(&self.desktops);
        let vms = Self::take(&self.vms);
        let downs = desktops.iter().map(|n| async move {
            if let Err(e) = desktop::down(reg, n).await {
                eprintln!("warning: stopping desktop '{n}': {e}");
            }
        });
        let vm_downs = vms.iter().map(|n| async move {
            if let Err(e) = crate::vm::down(reg, n).await {
                eprintln!("warning: stopping VM '{n}': {e}");
            }
        });
        futures::future::join(
            futures::future::join_all(downs),
            futures::future::join_all(vm_downs),
        )
        .await;
    }
}

/// Roles the tasks need, with platforms; conflicting platforms for one role are an error.
pub(super) fn roles_needed(tasks: &[&Task]) -> Result<BTreeMap<String, Platform>, RunError> {
    let mut out: BTreeMap<String, Platform> = BTreeMap::new();
    for t in tasks {
        for (role, need) in &t.envs {
            if let Some(p) = out.insert(role.clone(), need.platform)
                && p != need.platform
            {
                return Err(RunError::RoleConflict {
                    role: role.clone(),
                    one: p,
                    other: need.platform,
                    task: t.id.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// The environments a run makes, `(set, role, name)`: `run<tag>-s<i>-<role>` for `count`
/// sets of the Linux roles the tasks need.
fn run_names(
    roles: &BTreeMap<String, Platform>,
    count: usize,
) -> Result<Vec<(usize, String, String)>, RunError> {
    if let Some((role, _)) = roles.iter().find(|(_, p)| **p != Platform::Linux) {
        return Err(RunError::NotLocal(role.clone()));
    }
    // The process, and how many times it has started sets: a process with several sessions
    // at once (Python, pincer mcp) gives each its own names.
    static STARTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let tag = match STARTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
        0 => format!("{}", std::process::id() % 100_000),
        n => format!("{}n{n}", std::process::id() % 100_000),
    };
    Ok((0..count)
        .flat_map(|i| {
            let tag = &tag;
            roles
                .keys()
                .map(move |role| (i, role.clone(), format!("run{tag}-s{i}-{role}")))
        })
        .collect())
}

/// Starts every environment of `names` at once with `start` (each waits mostly on its own
/// processes) and groups them into sets; `vms` marks the roles as VMs to reset.
async fn start_sets<F, Fut>(
    roles: &BTreeMap<String, Platform>,
    count: usize,
    names: Vec<(usize, String, String)>,
    vms: bool,
    start: F,
) -> Result<Vec<EnvSet>, RunError>
where
    F: Fn(String, String) -> Fut,
    Fut: Future<Output = Result<Arc<Environment>, RunError>>,
{
    let started = futures::future::join_all(
        names
            .iter()
            .map(|(_, role, name)| start(role.clone(), name.clone())),
    )
    .await;
    let mut sets: Vec<EnvSet> = (0..count)
        .map(|i| EnvSet {
            name: format!("s{i}"),
            envs: BTreeMap::new(),
            platforms: roles.clone(),
            vms: BTreeMap::new(),
        })
        .collect();
    for ((i, role, name), env) in names.into_iter().zip(started) {
        sets[i].envs.insert(role.clone(), env?);
        if vms {
            sets[i].vms.insert(role, name);
        }
    }
    Ok(sets)
}

fn listed(names: &[(usize, String, String)]) -> String {
    names
        .iter()
        .map(|(_, _, n)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Brings up `count` sets of local desktops (of `size`, in `session`) for the Linux roles
/// the tasks need; with `allow_tools`, their agents serve API tools (`--allow-tools`).
pub(super) async fn local_sets(
    reg: &Registry,
    roles: &BTreeMap<String, Platform>,
    count: usize,
    (size, session): ((u32, u32), desktop::Session),
    allow_tools: bool,
    made: &Made,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<EnvSet>, RunError> {
    let names = run_names(roles, count)?;
    progress(&format!(
        "starting {} local desktops: {}",
        names.len(),
        listed(&names)
    ));
    start_sets(roles, count, names, false, |role, name| async move {
        // However the run ends, its desktops end with it.
        start_desktop(reg, &name, &role, (size, session), allow_tools, true, made).await
    })
    .await
}

/// Starts the local desktop `name` for `role` and connects to it; with `lifeline`, it
/// ends with this process however the process ends.
async fn start_desktop(
    reg: &Registry,
    name: &str,
    role: &str,
    (size, session): ((u32, u32), desktop::Session),
    allow_tools: bool,
    lifeline: bool,
    made: &Made,
) -> Result<Arc<Environment>, RunError> {
    // Listed before it starts, so that an interruption meanwhile stops it too.
    Made::push(&made.desktops, name.to_owned());
    desktop::up(
        reg,
        &DesktopOptions {
            name: name.to_owned(),
            size,
            window_manager: true,
            read_only: false,
            allow_tools,
            port: 0,
            home: None,
            dial: None,
            lifeline,
            session,
        },
    )
    .await
    .map_err(desktop_error(name, role))?;
    let env = reg.connect(Some(name), Deadlines::default()).await?;
    Ok(Arc::new(env))
}

/// Maps a desktop's failure to [`RunError::Desktop`], naming it and its role.
fn desktop_error(name: &str, role: &str) -> impl FnOnce(DesktopError) -> RunError {
    let (name, role) = (name.to_owned(), role.to_owned());
    move |source| RunError::Desktop {
        name,
        role,
        source: Box::new(source),
    }
}

/// The one local desktop `name` as the role `desktop`, a desktop of that name left from an
/// earlier launch stopped first; it outlives the process when `keep` is set.
pub(super) async fn one_desktop(
    reg: &Registry,
    name: &str,
    size: (u32, u32),
    keep: bool,
    allow_tools: bool,
    made: &Made,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<EnvSet>, RunError> {
    let role = "desktop";
    if desktop::read_state(name).is_some() {
        progress(&format!(
            "stopping the desktop '{name}' left from an earlier run"
        ));
        desktop::down(reg, name)
            .await
            .map_err(desktop_error(name, role))?;
    }
    let screen = (size, desktop::Session::X11);
    let env = start_desktop(reg, name, role, screen, allow_tools, !keep, made).await?;
    Ok(vec![EnvSet {
        name: "s0".into(),
        envs: [(role.to_owned(), env)].into(),
        platforms: [(role.to_owned(), Platform::Linux)].into(),
        vms: BTreeMap::new(),
    }])
}

/// The VMs of `--vm`: their image, size and agent.
#[derive(Debug, Clone)]
pub struct VmPlan {
    /// The image cache.
    pub cache: crate::image::Cache,
    /// The image.
    pub image: String,
    /// Guest memory, MiB; `None`: the image's default.
    pub memory_mib: Option<u32>,
    /// Virtual CPUs.
    pub cpus: u32,
    /// The agent to run in them.
    pub agent: std::path::PathBuf,
}

impl VmPlan {
    /// VMs of `image` from the user's image cache (`pincer image list`), running the agent
    /// beside this program.
    pub fn new(image: String, memory_mib: Option<u32>, cpus: u32) -> Result<Self, DesktopError> {
        Ok(Self {
            cache: crate::image::Cache::at(crate::paths::image_cache_dir()),
            image,
            memory_mib,
            cpus,
            agent: desktop::agent_binary()?,
        })
    }
}

/// Brings up `count` sets of VMs of one image for the Linux roles the tasks need. The
/// first makes the image's golden state if there is none; the others restore it.
pub(super) async fn vm_sets(
    reg: &Registry,
    roles: &BTreeMap<String, Platform>,
    count: usize,
    plan: &VmPlan,
    made: &Made,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<EnvSet>, RunError> {
    let names = run_names(roles, count)?;
    progress(&format!(
        "starting {} VMs of {}: {}",
        names.len(),
        plan.image,
        listed(&names)
    ));
    start_sets(roles, count, names, true, |role, name| async move {
        Made::push(&made.vms, name.clone());
        let opts = crate::vm::UpOptions {
            name: name.clone(),
            image: plan.image.clone(),
            memory_mib: plan.memory_mib,
            cpus: plan.cpus,
            agent: plan.agent.clone(),
            // However the run ends, its VMs end with it.
            lifeline: true,
        };
        let up = crate::vm::up(reg, &plan.cache, &opts, &mut |m| progress(m))
            .await
            .map_err(|source| RunError::Vm {
                name: name.clone(),
                role,
                source: Box::new(source),
            })?;
        progress(&format!(
            "VM {name} up ({}) in {:.1} s",
            up.state.accel,
            up.timing.golden_s + up.timing.ready_s
        ));
        let env = reg.connect(Some(&name), Deadlines::default()).await?;
        Ok(Arc::new(env))
    })
    .await
}

/// Sets from `ROLE=ENV,ROLE=ENV` specs, connecting through the envs file.
pub(super) async fn named_sets(reg: &Registry, specs: &[String]) -> Result<Vec<EnvSet>, RunError> {
    let file = reg.load()?;
    let mut sets = Vec::new();
    let mut used = BTreeSet::new();
    for (i, spec) in specs.iter().enumerate() {
        let mut envs = BTreeMap::new();
        let mut platforms = BTreeMap::new();
        let mut vms = BTreeMap::new();
        for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = |problem: String| RunError::BadSet {
                spec: spec.clone(),
                problem,
            };
            let (role, name) = pair
                .split_once('=')
                .ok_or_else(|| bad("write ROLE=ENV pairs, e.g. desktop=vm1,phone=pixel".into()))?;
            if !used.insert(name.to_owned()) {
                return Err(bad(format!(
                    "environment '{name}' is in two sets; each set needs its own environments"
                )));
            }
            let entry = file.envs.get(name).ok_or_else(|| {
                bad(format!(
                    "no environment '{name}' in {}",
                    reg.path().display()
                ))
            })?;
            if entry.vm.is_some() {
                vms.insert(role.to_owned(), name.to_owned());
            }
            let env = reg.connect(Some(name), Deadlines::default()).await?;
            envs.insert(role.to_owned(), Arc::new(env));
            platforms.insert(role.to_owned(), entry.platform);
        }
        sets.push(EnvSet {
            name: format!("s{i}"),
            envs,
            platforms,
            vms,
        });
    }
    Ok(sets)
}
