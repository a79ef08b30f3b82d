//! `slurm-cluster`: a real, private Slurm cluster on this machine (munge, slurmctld and
//! three slurmd, see `pincer_tests::slurm`) for as long as this program runs. It prints
//! the `slurm.conf` path for `SLURM_CONF` once the nodes are idle, then waits until its
//! standard input closes and stops the cluster. `./run.sh bench` uses it to measure a
//! sharded run against one machine.

use std::io::Read;

fn main() {
    let cluster = pincer_tests::slurm::Cluster::start();
    println!("{}", cluster.conf().display());
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(cluster);
}
