//! Indexes over the Cluster cache: the Clusters of each namespace, and the namespaces using each
//! ClusterClass from another namespace.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::core::Resource;

/// The cached objects of one kind grouped by a key derived from each object (its namespace,
/// the ClusterClass it uses), kept by the reflector task from the same events that update the
/// cache, before the event reaches a controller. Finding a namespace's Clusters then costs the
/// namespace's size, not the cache's (as Linkerd's policy index keeps its maps per namespace).
pub struct Index<K> {
    key: fn(&K) -> Option<String>,
    inner: Arc<RwLock<IndexMaps>>,
}

impl<K> Clone for Index<K> {
    fn clone(&self) -> Self {
        Self {
            key: self.key,
            inner: self.inner.clone(),
        }
    }
}

/// (namespace, name) of an indexed object.
pub(super) type Member = (String, String);

#[derive(Default)]
pub(super) struct IndexMaps {
    members: HashMap<String, BTreeSet<Member>>,
    /// Each indexed object's key, to move it when its key changes.
    key_of: HashMap<Member, String>,
}

impl<K: Resource> Index<K> {
    pub(super) fn new(key: fn(&K) -> Option<String>) -> Self {
        Self {
            key,
            inner: Arc::default(),
        }
    }

    /// (namespace, name) of the objects under `key`.
    pub fn members(&self, key: &str) -> Vec<Member> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .members
            .get(key)
            .map(|members| members.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn member(object: &K) -> Option<Member> {
        let meta = object.meta();
        Some((
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone()?,
        ))
    }

    pub(super) fn apply(&self, object: &K) {
        let Some(member) = Self::member(object) else {
            return;
        };
        let key = (self.key)(object);
        let mut maps = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if maps.key_of.get(&member) == key.as_ref() {
            return;
        }
        maps.remove(&member);
        if let Some(key) = key {
            maps.members
                .entry(key.clone())
                .or_default()
                .insert(member.clone());
            maps.key_of.insert(member, key);
        }
    }

    pub(super) fn delete(&self, object: &K) {
        if let Some(member) = Self::member(object) {
            self.inner
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&member);
        }
    }

    /// Replaces the whole index after a (re)list.
    pub(super) fn rebuild(&self, objects: &[Arc<K>]) {
        let mut fresh = IndexMaps::default();
        for object in objects {
            if let (Some(member), Some(key)) = (Self::member(object), (self.key)(object)) {
                fresh
                    .members
                    .entry(key.clone())
                    .or_default()
                    .insert(member.clone());
                fresh.key_of.insert(member, key);
            }
        }
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = fresh;
    }
}

impl IndexMaps {
    fn remove(&mut self, member: &Member) {
        if let Some(old) = self.key_of.remove(member)
            && let Some(members) = self.members.get_mut(&old)
        {
            members.remove(member);
            // No entry outlives the last object under its key.
            if members.is_empty() {
                self.members.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CapiCluster;
    use crate::controllers::import::stores::cross_namespace_class_key;

    impl<K: Resource> Index<K> {
        /// Every key with at least one object.
        pub fn keys(&self) -> Vec<String> {
            let maps = self.inner.read().unwrap_or_else(|p| p.into_inner());
            maps.members.keys().cloned().collect()
        }
    }

    fn cluster(namespace: &str, name: &str) -> Arc<CapiCluster> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": name, "namespace": namespace},
            }))
            .expect("cluster"),
        )
    }

    fn classy(namespace: &str, name: &str, class_namespace: &str) -> Arc<CapiCluster> {
        let mut cluster = (*cluster(namespace, name)).clone();
        cluster.body.insert("spec", serde_json::json!({"topology": {"classRef": {"name": "quick", "namespace": class_namespace}}}));
        Arc::new(cluster)
    }

    fn namespaces(index: &Index<CapiCluster>, key: &str) -> Vec<String> {
        index
            .members(key)
            .into_iter()
            .map(|(ns, name)| format!("{ns}/{name}"))
            .collect()
    }

    #[test]
    fn namespace_index_follows_applies_deletes_and_relists() {
        let index = Index::new(|c: &CapiCluster| c.metadata.namespace.clone());
        index.apply(&*cluster("a", "c1"));
        index.apply(&*cluster("a", "c2"));
        index.apply(&*cluster("a", "c1"));
        index.apply(&*cluster("b", "c1"));
        assert_eq!(namespaces(&index, "a"), ["a/c1", "a/c2"]);
        assert_eq!(namespaces(&index, "b"), ["b/c1"]);
        assert!(index.members("c").is_empty());

        index.delete(&*cluster("a", "c1"));
        assert_eq!(namespaces(&index, "a"), ["a/c2"]);
        // The last object under a key takes the key's entry with it.
        index.delete(&*cluster("b", "c1"));
        assert_eq!(index.keys(), ["a"]);

        // A relist replaces everything, including what vanished meanwhile.
        index.rebuild(&[cluster("c", "c9")]);
        assert!(index.members("a").is_empty());
        assert_eq!(index.keys(), ["c"]);
        assert_eq!(index.inner.read().expect("lock").key_of.len(), 1);
    }

    #[test]
    fn class_index_moves_a_cluster_whose_class_changes() {
        let index = Index::new(cross_namespace_class_key);
        index.apply(&*classy("a", "c1", "classes"));
        index.apply(&*classy("b", "c2", "classes"));
        // Same-namespace classes need no cross-namespace objects: not indexed.
        index.apply(&*classy("classes", "c3", "classes"));
        index.apply(&*cluster("d", "plain"));
        assert_eq!(namespaces(&index, "classes/quick"), ["a/c1", "b/c2"]);

        index.apply(&*classy("a", "c1", "other"));
        assert_eq!(namespaces(&index, "classes/quick"), ["b/c2"]);
        assert_eq!(namespaces(&index, "other/quick"), ["a/c1"]);
        index.apply(&*cluster("b", "c2"));
        assert_eq!(index.keys(), ["other/quick"]);
        assert_eq!(index.inner.read().expect("lock").key_of.len(), 1);
    }
}
