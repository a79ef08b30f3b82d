//! A sharded run on Kubernetes: an Indexed Job, one pod per shard, each running
//! `pincer run --shard $JOB_COMPLETION_INDEX/N --resume` in the container image built from
//! an image recipe (`pincer image build --container`), writing into a run directory on a
//! shared volume (a ReadWriteMany PersistentVolumeClaim mounted at `/runs`). Kubernetes
//! retries a failed pod's index by itself (`backoffLimitPerIndex`); the retried pod skips
//! what its shard finished. Shards may run VMs instead (`--vm`): QEMU in the pod, the VM
//! images on the shared volume, and with `--kvm` the node's `/dev/kvm`. The submitter
//! creates the Job through the API (kube-rs) and follows its status; `--dry-run` prints the
//! manifest instead.

use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, HostPathVolumeSource, PersistentVolumeClaimVolumeSource, PodSpec,
    PodTemplateSpec, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Where pods mount the shared volume.
pub const MOUNT: &str = "/runs";

/// Where VM shards find VM images: on the shared volume, built once for every pod
/// (`PINCER_IMAGE_CACHE=<the volume>/.pincer/images pincer image build RECIPE`).
pub const IMAGES: &str = "/runs/.pincer/images";

/// Why a Kubernetes run could not be created or did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeError {
    /// No cluster configuration.
    #[error(
        "no Kubernetes cluster configured ({0}): set KUBECONFIG or ~/.kube/config, or run in a pod; --dry-run prints the manifest without a cluster"
    )]
    Config(String),
    /// A name Kubernetes would refuse.
    #[error(
        "'{0}' cannot name a Kubernetes Job: use lower-case letters, digits and '-' (at most 50), starting with a letter"
    )]
    BadName(String),
    /// A Job of this name exists and the run is not resumed.
    #[error(
        "a Job named {0} exists (an earlier run into the same directory on the volume): continue that run with --resume (pincer replaces the finished Job), or choose another --out"
    )]
    Exists(String),
    /// The API refused or failed.
    #[error("the Kubernetes API: {0}")]
    Api(#[from] kube::Error),
    /// The Job failed.
    #[error(
        "the Job {name} failed ({reason}); failed shards: {failed}. Finished task runs are kept on the volume: continue with the same command and --resume"
    )]
    Failed {
        /// The Job.
        name: String,
        /// Kubernetes' reason.
        reason: String,
        /// Failed indexes.
        failed: String,
    },
}

/// What to create.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The Job's name (also the run directory's name on the volume).
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Container image with pincer, its agent and the desktop's programs.
    pub image: String,
    /// Shards (pods).
    pub shards: u32,
    /// The PersistentVolumeClaim holding run directories.
    pub claim: String,
    /// `pincer run` arguments of every shard, without `--shard`; `--out` under [`MOUNT`].
    pub args: Vec<String>,
    /// Retries per shard.
    pub retries: u32,
    /// The shards run VMs (`--vm`): their images come from [`IMAGES`].
    pub vms: bool,
    /// Give the pods the node's `/dev/kvm` (nodes with hardware virtualization); without
    /// it QEMU runs with TCG, as pincer's probe decides.
    pub kvm: bool,
}

/// Checks a Job name (DNS-1123 label, with room for the pods' suffixes).
pub fn check_name(name: &str) -> Result<(), KubeError> {
    let ok = (1..=50).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(KubeError::BadName(name.to_owned()))
    }
}

/// The shell line a pod runs: the shard's `pincer run`, its index from the Job.
pub fn command(plan: &Plan) -> Vec<String> {
    let mut line = String::from("exec pincer");
    for a in &plan.args {
        line.push(' ');
        line.push_str(&super::slurm::quote(a));
    }
    line.push_str(&format!(
        " --shard \"${{JOB_COMPLETION_INDEX}}/{}\"",
        plan.shards
    ));
    vec!["sh".into(), "-c".into(), line]
}

/// The Indexed Job of a plan.
pub fn manifest(plan: &Plan) -> Job {
    let labels = BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "pincer".to_owned()),
        ("pincer/run".to_owned(), plan.name.clone()),
    ]);
    let env = |name: &str, value: &str| EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    };
    // Desktops, VMs and their names belong to the pod, not to the shared volume.
    let mut vars = vec![
        env("PINCER_STATE_DIR", "/tmp/pincer-state"),
        env("PINCER_ENVS", "/tmp/pincer-state/envs.toml"),
    ];
    let mut mounts = vec![VolumeMount {
        name: "runs".into(),
        mount_path: MOUNT.into(),
        ..VolumeMount::default()
    }];
    let mut volumes = vec![Volume {
        name: "runs".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: plan.claim.clone(),
            ..PersistentVolumeClaimVolumeSource::default()
        }),
        ..Volume::default()
    }];
    if plan.vms {
        vars.push(env("PINCER_IMAGE_CACHE", IMAGES));
    }
    if plan.kvm {
        mounts.push(VolumeMount {
            name: "kvm".into(),
            mount_path: "/dev/kvm".into(),
            ..VolumeMount::default()
        });
        volumes.push(Volume {
            name: "kvm".into(),
            host_path: Some(HostPathVolumeSource {
                path: "/dev/kvm".into(),
                type_: Some("CharDevice".into()),
            }),
            ..Volume::default()
        });
    }
    let container = Container {
        name: "shard".into(),
        image: Some(plan.image.clone()),
        command: Some(command(plan)),
        env: Some(vars),
        volume_mounts: Some(mounts),
        // A device node from the host is usable in a container only with the devices
        // cgroup opened, which `privileged` does.
        security_context: plan.kvm.then(|| SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    Job {
        metadata: ObjectMeta {
            name: Some(plan.name.clone()),
            namespace: Some(plan.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            completion_mode: Some("Indexed".into()),
            completions: Some(plan.shards as i32),
            parallelism: Some(plan.shards as i32),
            backoff_limit_per_index: Some(plan.retries as i32),
            // A failed pod's replacement starts only once it is gone: never two pods of
            // one shard at once (the second would find the shard's lock held).
            pod_replacement_policy: Some("Failed".into()),
            ttl_seconds_after_finished: Some(7 * 24 * 3600),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// How many indexes a Kubernetes index list ("0,2-4") names.
pub fn count_indexes(list: &str) -> usize {
    list.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('-') {
            Some((a, b)) => match (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 0,
            },
            None => usize::from(p.trim().parse::<usize>().is_ok()),
        })
        .sum()
}

/// A Job's state from its status: `Some(Ok)` complete, `Some(Err)` failed, `None` running.
fn finished(name: &str, status: &JobStatus) -> Option<Result<(), KubeError>> {
    for c in status.conditions.iter().flatten() {
        if c.status != "True" {
            continue;
        }
        match c.type_.as_str() {
            "Complete" => return Some(Ok(())),
            "Failed" => {
                return Some(Err(KubeError::Failed {
                    name: name.to_owned(),
                    reason: c.reason.clone().unwrap_or_else(|| "no reason given".into()),
                    failed: status.failed_indexes.clone().unwrap_or_else(|| "-".into()),
                }));
            }
            _ => {}
        }
    }
    None
}

/// How long reading the Job may fail before the run gives up (a restarting API server).
const TROUBLE_GRACE: Duration = Duration::from_secs(120);

fn api(plan: &Plan, client: kube::Client) -> kube::Api<Job> {
    kube::Api::namespaced(client, &plan.namespace)
}

async fn client() -> Result<kube::Client, KubeError> {
    kube::Client::try_default()
        .await
        .map_err(|e| KubeError::Config(e.to_string()))
}

/// Creates the Job; with `resume`, an earlier Job of the same name (the run's previous
/// attempt) is deleted first, its pods with it.
pub async fn create(
    plan: &Plan,
    resume: bool,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(), KubeError> {
    use kube::api::{DeleteParams, PostParams};
    let jobs = api(plan, client().await?);
    match jobs.create(&PostParams::default(), &manifest(plan)).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            if !resume {
                return Err(KubeError::Exists(plan.name.clone()));
            }
            progress(&format!(
                "a Job {} exists (the run's earlier attempt): replacing it",
                plan.name
            ));
            jobs.delete(&plan.name, &DeleteParams::background()).await?;
            let start = Instant::now();
            while jobs.get_opt(&plan.name).await?.is_some() {
                if start.elapsed() > TROUBLE_GRACE {
                    return Err(KubeError::Exists(plan.name.clone()));
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            jobs.create(&PostParams::default(), &manifest(plan)).await?;
        }
        Err(e) => return Err(e.into()),
    }
    progress(&format!(
        "created Job {}/{} ({} pods, image {})",
        plan.namespace, plan.name, plan.shards, plan.image
    ));
    Ok(())
}

/// Deletes the Job and its pods (a Ctrl-C of the submitter).
pub async fn delete(plan: &Plan) -> Result<(), KubeError> {
    use kube::api::DeleteParams;
    api(plan, client().await?)
        .delete(&plan.name, &DeleteParams::background())
        .await?;
    Ok(())
}

/// Follows the Job to the end; `progress` gets a line whenever its counts change.
pub async fn follow(plan: &Plan, progress: &mut (dyn FnMut(&str) + Send)) -> Result<(), KubeError> {
    let jobs = api(plan, client().await?);
    let started = Instant::now();
    let mut last = String::new();
    let mut trouble_since: Option<Instant> = None;
    loop {
        let status = match jobs.get(&plan.name).await {
            Ok(job) => {
                trouble_since = None;
                job.status.unwrap_or_default()
            }
            Err(e) => {
                let since = *trouble_since.get_or_insert_with(Instant::now);
                if since.elapsed() > TROUBLE_GRACE {
                    return Err(e.into());
                }
                progress(&format!("reading the Job: {e}; trying again"));
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        let line = format!(
            "[{:>4.0} s] shards done {}/{}, running {}, failed pods {}{}",
            started.elapsed().as_secs_f64(),
            count_indexes(status.completed_indexes.as_deref().unwrap_or("")),
            plan.shards,
            status.active.unwrap_or(0),
            status.failed.unwrap_or(0),
            status
                .failed_indexes
                .as_deref()
                .map(|f| format!(" (shards given up: {f})"))
                .unwrap_or_default()
        );
        if line != last {
            progress(&line);
            last = line;
        }
        if let Some(end) = finished(&plan.name, &status) {
            return end;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_lists_count() {
        assert_eq!(count_indexes(""), 0);
        assert_eq!(count_indexes("0"), 1);
        assert_eq!(count_indexes("0,2-4,7"), 5);
        assert_eq!(count_indexes("4-2,x"), 0);
    }

    #[test]
    fn job_names_are_dns_labels() {
        check_name("demo-oracle-3").unwrap();
        for bad in ["Demo", "3demo", "demo_x", "demo-", "", &"a".repeat(51)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
