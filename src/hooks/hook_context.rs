//! What the hooks share besides the base context ([`HookContext`]): Fleet's agent chart, the
//! bootstrap preparations under way and the view of which bootstrap Secrets exist.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use crate::apply::Target;
use crate::context::Context;
use crate::helm::HelmSettings;
use crate::helm::agent_chart::AgentChart;
use crate::hooks::bootstrap_secrets::BootstrapSecrets;
use crate::model::hook_plan::HookOutcome;
use crate::model::plan::{Next, Plan, Write};

/// The hooks' context (every replica serves the hooks).
#[derive(Clone)]
pub struct HookContext {
    pub base: Arc<Context>,
    /// Fleet's `fleet-agent` chart, rendered for bootstrap Secrets.
    pub agent_chart: Arc<AgentChart>,
    /// Clusters (`namespace/name`) whose bootstrap Secret is being prepared in the background:
    /// at most one preparation per Cluster; an entry lives only while its preparation runs.
    pub preparing: Arc<Mutex<BTreeSet<String>>>,
    /// Which bootstrap Secrets exist (never fed unless the manager, or a test, runs its feed:
    /// then every lookup misses and the hooks read the API server).
    pub bootstrap_secrets: BootstrapSecrets,
}

impl HookContext {
    pub fn new(base: Arc<Context>, bootstrap_secrets: BootstrapSecrets) -> Self {
        // A private helm home: pulls for the hooks never share helm's caches with an install.
        let agent_chart = Arc::new(AgentChart::new(
            HelmSettings {
                home: None,
                ..HelmSettings::from_flags(&base.flags)
            },
            base.metrics.clone(),
        ));
        Self {
            base,
            agent_chart,
            preparing: Arc::default(),
            bootstrap_secrets,
        }
    }

    /// Carries out `writes` in order through the one runner, with the hooks' client; an error is
    /// the hook's answer, a retry naming the write that failed ([`Target::answer`]).
    pub async fn write(&self, writes: Vec<Write>) -> Result<(), HookOutcome> {
        let target = Target {
            client: &self.base.client,
            recorder: &self.base.recorder,
            expectations: None,
        };
        target
            .answer(Plan::of(writes, Next::AwaitChange))
            .await
            .map(drop)
    }
}
