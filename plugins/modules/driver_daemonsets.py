#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: driver_daemonsets
short_description: NVIDIA driver DaemonSets per RHCOS version, per kernel, or one for all GPU nodes
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - Computes the driver DaemonSets the GPU nodes need and brings the namespace in line with them, with the GPU
    Operator's names, labels, node selectors and DTK side-car layout, so that its tooling keeps working.
  - I(mode=rhcos) (OpenShift) gives one DaemonSet per RHCOS version, C(nvidia-driver-daemonset-<rhcos>), whose pods build the
    driver with that version's Driver Toolkit (DTK) side-car.
    I(mode=kernel) gives one DaemonSet per kernel with a precompiled driver image
    C(<repository>/<image>:<branch>-<kernel>-<osTag>) where that image exists (I(precompiled_available)), and, unlike the
    GPU Operator, falls back to a DTK build for RHCOS nodes whose image does not exist.
    I(mode=single) gives one DaemonSet for all GPU nodes.
  - DaemonSets use the C(OnDelete) update strategy, so a changed DaemonSet replaces a node's driver pod only when that
    pod is deleted, after the node was prepared (drained).
  - Each DaemonSet is rendered from the driver role's template (O(daemonset_template)), as the roles render their other
    operands' objects.
  - Writes are server-side applies as field manager C(accelerators.gpu); a DaemonSet that already matches gets no
    request, so a second run reports C(changed=false) and writes nothing. Check mode sends every write as a server-side
    dry run, so the API server still validates it.
  - A version whose DTK image is unresolved is blocked, no DaemonSet that cannot work is created for it, and the module
    fails naming the nodes that would be left without a driver, changing nothing, unless I(allow_blocked).
  - A change that would move a GPU node to an older driver (RV(downgrades)) fails the module before any write, naming
    the running and requested versions and the nodes, unless I(allow_downgrade).
  - A driver DaemonSet that is no longer needed is deleted only when it has no scheduled or misscheduled pod and no GPU
    node has its version (by NFD label or osImage), and only if it has not changed since it was read. DaemonSets this
    collection did not create (no C(app.kubernetes.io/managed-by=accelerators.gpu)) are never changed or deleted.
  - Every result carries I(api_requests), the API requests the module sent, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
options:
  namespace:
    description:
      - Namespace of the driver DaemonSets.
    type: str
    required: true
  state:
    description:
      - V(present) creates, updates and deletes driver DaemonSets as the GPU nodes need.
      - V(absent) deletes every driver DaemonSet this collection manages in I(namespace), pods or not.
    type: str
    choices: [present, absent]
    default: present
  mode:
    description:
      - How GPU nodes are grouped into DaemonSets, see the description.
    type: str
    choices: [rhcos, kernel, single]
    default: rhcos
  driver:
    description:
      - The driver pod template. Required with I(state=present).
    type: dict
    suboptions:
      repository:
        description:
          - Registry and path of the driver image, for example C(nvcr.io/nvidia). Needed unless I(image_ref) is given
            (and always with I(mode=kernel)).
        type: str
      image:
        description:
          - Image name in I(repository); C(driver) when omitted.
        type: str
      version:
        description:
          - Driver version, for example C(550.90.07); the image tag is C(<version>-<osTag>) (C(rhcos4.16), C(rhel9.6)).
        type: str
      branch:
        description:
          - Driver branch of precompiled images, for example C(550) (I(mode=kernel)).
        type: str
      image_ref:
        description:
          - Full driver image reference; beats I(repository), I(image) and I(version) for DTK and single builds.
        type: str
      image_pull_policy:
        description:
          - Pull policy of the containers; C(IfNotPresent) when omitted.
        type: str
        choices: [Always, IfNotPresent, Never]
      image_pull_secrets:
        description:
          - Names of pull secrets in I(namespace).
        type: list
        elements: str
      env:
        description:
          - Extra environment of the driver container (Kubernetes C(EnvVar) dicts); a name already set is replaced.
        type: list
        elements: dict
      resources:
        description:
          - Kubernetes C(ResourceRequirements) of the driver container.
        type: dict
      trusted_ca_config_map:
        description:
          - ConfigMap in I(namespace) whose C(ca-bundle.crt) is the CA bundle the driver container trusts (a proxy's),
            mounted as the GPU Operator does at C(/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem).
        type: str
      repo_config:
        description:
          - ConfigMap in I(namespace) of package repository files, as the GPU Operator's C(repoConfig.configMapName)
            - each key mounted by C(subPath) where the OS of the DaemonSet's driver image reads repositories
            (C(/etc/apt/sources.list.d) on Ubuntu and Debian, C(/etc/yum.repos.d) on RHEL, RHCOS, CentOS, Rocky and
            Oracle Linux, C(/etc/zypp/repos.d) on SLES) in the driver, C(nvidia-peermem-ctr), C(nvidia-fs-ctr) and
            C(nvidia-gdrcopy-ctr) containers, so that a driver build on a node without internet access installs the
            kernel headers from a mirror. Not with precompiled driver images, which install no packages.
          - A ConfigMap that does not exist fails the module before any write.
        type: str
      cert_config:
        description:
          - ConfigMap in I(namespace) of CA certificates, as the GPU Operator's C(certConfig.name) - each key mounted
            by C(subPath) into the OS's trust store (C(/usr/local/share/ca-certificates) on Ubuntu and Debian,
            C(/etc/pki/ca-trust/extracted/pem) on the RHEL family, C(/etc/pki/trust/anchors) on SLES) of the same
            containers as O(driver.repo_config), for example the CA of a mirror. Not with precompiled driver images.
          - A ConfigMap that does not exist fails the module before any write.
        type: str
      kernel_module_config:
        description:
          - ConfigMap in I(namespace) of kernel module parameters, as the GPU Operator's C(kernelModuleConfig.name) -
            each key mounted at C(/drivers/<key>), where the driver container reads C(nvidia.conf),
            C(nvidia-uvm.conf), C(nvidia-modeset.conf) and C(nvidia-peermem.conf) (one or more C(NVreg_*) parameters
            a line) and loads the modules with them.
          - A ConfigMap that does not exist fails the module before any write.
        type: str
      secret_env:
        description:
          - Secret in I(namespace) whose keys become environment variables (C(envFrom.secretRef)) of the driver,
            C(nvidia-fs-ctr) and C(nvidia-gdrcopy-ctr) containers, as the GPU Operator's C(secretEnv), for example a
            proxy password the driver's scripts read.
          - A Secret that does not exist fails the module before any write.
        type: str
      tolerations:
        description:
          - Pod tolerations; C(nvidia.com/gpu:NoSchedule) when omitted, none with an empty list.
        type: list
        elements: dict
      labels:
        description:
          - Extra labels of the DaemonSets and their pods.
        type: dict
      annotations:
        description:
          - Annotations of the DaemonSets and their pods.
        type: dict
      node_selector:
        description:
          - Extra node selector terms, added to the GPU Operator's.
        type: dict
      startup_probe:
        description:
          - Startup probe of the driver container; by default about 21 minutes for a build.
        type: dict
      liveness_probe:
        description:
          - Liveness probe of the driver container.
        type: dict
      readiness_probe:
        description:
          - Readiness probe of the driver container.
        type: dict
      service_account_name:
        description:
          - Service account of the pods; C(nvidia-driver) when omitted. It must exist.
        type: str
      priority_class_name:
        description:
          - Priority class of the pods; C(system-node-critical) when omitted.
        type: str
      manager:
        description:
          - The GPU Operator's C(k8s-driver-manager) init container (C(driver-manager uninstall_driver)). Before a new
            driver container starts on a node, it stops the operands that hold the driver, evicts the GPU workloads
            or drains the node as its environment says, and unloads the old modules. None when omitted.
        type: dict
        suboptions:
          image:
            description: Its image, for example C(nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.8.1).
            type: str
            required: true
          env:
            description:
              - Its settings (Kubernetes C(EnvVar) dicts), such as C(ENABLE_GPU_POD_EVICTION), C(ENABLE_AUTO_DRAIN),
                C(DRAIN_POD_SELECTOR_LABEL), C(DRAIN_TIMEOUT_SECONDS); C(NODE_NAME), C(NVIDIA_VISIBLE_DEVICES=void)
                and C(OPERATOR_NAMESPACE) are set.
            type: list
            elements: dict
      rdma:
        description:
          - GPUDirect RDMA, as the GPU Operator's C(driver.rdma.enabled) - the side container C(nvidia-peermem-ctr)
            (the driver image, C(nvidia-driver reload_nvidia_peermem)), which loads C(nvidia-peermem) once the
            network driver is loaded, and C(GPU_DIRECT_RDMA_ENABLED=true) in the driver and C(k8s-driver-manager)
            containers.
          - The network driver is the NVIDIA Network Operator's driver container (its readiness file
            C(/run/mellanox/drivers/.driver-ready)) unless I(use_host_mofed).
        type: bool
        default: false
      use_host_mofed:
        description:
          - With I(rdma), the network driver (MOFED) is installed on the host, as the GPU Operator's
            C(driver.rdma.useHostMofed) - C(USE_HOST_MOFED=true), and the driver builds C(nvidia-peermem) against the
            host's C(/usr/src).
        type: bool
        default: false
      gds_image:
        description:
          - GPUDirect Storage - the side container C(nvidia-fs-ctr) with this image, tagged C(<image>-<osTag>) as the
            driver image (a digest reference as it is), and C(GDS_ENABLED=true) in the driver (and DTK) containers.
          - Not with precompiled driver images, which carry no sources to build C(nvidia-fs) against (the GPU
            Operator refuses them too) - the module fails naming the DaemonSet.
        type: str
      gdrcopy_image:
        description:
          - GDRCopy - the side container C(nvidia-gdrcopy-ctr) with this image, tagged as O(driver.gds_image), and
            C(GDRCOPY_ENABLED=true) in the driver (and DTK) containers. Not with precompiled driver images either.
        type: str
      kernel_module_type:
        description:
          - The NVIDIA kernel modules the driver containers build and load, as the GPU Operator's
            C(kernelModuleType) - C(KERNEL_MODULE_TYPE=<value>) in the driver container, and
            C(OPEN_KERNEL_MODULES_ENABLED=true) with V(open). Neither when omitted.
          - V(auto) lets the driver container choose (C(nvidia-installer)'s recommendation for the node's GPUs, else by
            branch - proprietary below 560, open from 560).
          - Refused before any write, naming the nodes and what to set, where the drivers would load the proprietary
            modules (V(proprietary), or V(auto) on a branch below 560) on nodes whose GPUs run only on the open ones
            (Blackwell, Grace Hopper, by GPU feature discovery's C(nvidia.com/gpu.family), C(gpu.compute.major) and
            C(gpu.product) labels), or with O(driver.gds_image) of C(nvidia-fs) 2.17.5 or later (or a digest), which
            is supported only with the open modules.
        type: str
        choices: [auto, open, proprietary]
  configurations:
    description:
      - Named driver configurations, as the GPU Operator's C(NVIDIADriver) resources - each a node pool with a driver of
        its own. Each states only what differs from O(driver), the common settings; C(env) entries come after the
        common ones (an entry of a name already set replaces it), C(labels) and C(annotations) are merged over them.
      - A configuration with a node selection owns the GPU nodes it selects; the default one (C(default=true), or
        O(driver) itself, named C(default), when none is) the GPU nodes no other selects. Every GPU node is labelled
        C(nvidia.com/gpu-operator.driver.owner=<configuration>), the upstream owner label, which each configuration's
        DaemonSets select.
      - The default configuration's DaemonSets keep the names of the description; a named one's are
        C(nvidia-gpu-driver-<configuration>-<RHCOS build>), C(nvidia-gpu-driver-<configuration>-<kernel>-<osTag>)
        (precompiled) or C(nvidia-gpu-driver-<configuration>-<osTag>) (mode single), cut and ended with a hash past 63
        characters.
      - Refused before any write, naming the nodes and the configurations - a node two non-default configurations
        select, two defaults, a selection by the owner label, a non-default configuration that selects nothing, and
        each configuration's own refusals (kernel module type, ConfigMaps and Secret, downgrades).
      - A node whose owner changes (its labels were edited, or a selector) is not relabelled here - it is labelled
        C(accelerators.gpu/driver-owner-next=<configuration>), counted outdated (RV(outdated)), and moved by the
        rollout (M(accelerators.gpu.driver_upgrade)) - cordoned, its GPU workloads evicted, relabelled, its new
        driver awaited and validated.
    type: list
    elements: dict
    suboptions:
      name:
        description: The configuration's name - the owner label's value and part of its DaemonSets' names, 1 to 30
          lower-case alphanumerics and C(-).
        type: str
        required: true
      default:
        description: The fallback for GPU nodes no other configuration selects; at most one, with no node selection.
        type: bool
        default: false
      node_selector:
        description: Labels a node must carry to be this configuration's (C(nodeSelector)).
        type: dict
      node_affinity:
        description: A Kubernetes C(NodeAffinity) whose C(requiredDuringSchedulingIgnoredDuringExecution) terms a node
          must match to be this configuration's.
        type: dict
      use_precompiled:
        description: Precompiled driver images per kernel (as I(mode=kernel)); C(version) is then their branch. The
          module's I(mode) when omitted.
        type: bool
      upgrade_policy:
        description: The rollout budget of this configuration's nodes, read by M(accelerators.gpu.driver_upgrade)
          (its C(configurations)).
        type: dict
        suboptions:
          max_parallel:
            description: At most this many of its nodes in one wave (0 - no limit).
            type: int
          max_unavailable:
            description: At most this many (or this percentage) of its nodes without a working driver at once.
            type: raw
      gds:
        description: GPUDirect Storage with the image of O(gpudirect_images.gds); the common setting when omitted.
        type: bool
      gdrcopy:
        description: GDRCopy with the image of O(gpudirect_images.gdrcopy); the common setting when omitted.
        type: bool
      version:
        description: As O(driver.version), for this configuration.
        type: str
      repository:
        description: As O(driver.repository), for this configuration.
        type: str
      image:
        description: As O(driver.image), for this configuration.
        type: str
      branch:
        description: As O(driver.branch), for this configuration.
        type: str
      image_ref:
        description: As O(driver.image_ref), for this configuration.
        type: str
      image_pull_policy:
        description: As O(driver.image_pull_policy), for this configuration.
        type: str
        choices: [Always, IfNotPresent, Never]
      image_pull_secrets:
        description: As O(driver.image_pull_secrets), for this configuration.
        type: list
        elements: str
      kernel_module_type:
        description: As O(driver.kernel_module_type), for this configuration.
        type: str
        choices: [auto, open, proprietary]
      repo_config:
        description: As O(driver.repo_config), for this configuration.
        type: str
      cert_config:
        description: As O(driver.cert_config), for this configuration.
        type: str
      kernel_module_config:
        description: As O(driver.kernel_module_config), for this configuration.
        type: str
      secret_env:
        description: As O(driver.secret_env), for this configuration.
        type: str
      rdma:
        description: As O(driver.rdma), for this configuration.
        type: bool
      use_host_mofed:
        description: As O(driver.use_host_mofed), for this configuration.
        type: bool
      resources:
        description: As O(driver.resources), for this configuration.
        type: dict
      tolerations:
        description: As O(driver.tolerations), for this configuration.
        type: list
        elements: dict
      priority_class_name:
        description: As O(driver.priority_class_name), for this configuration.
        type: str
      startup_probe:
        description: As O(driver.startup_probe), for this configuration.
        type: dict
      liveness_probe:
        description: As O(driver.liveness_probe), for this configuration.
        type: dict
      readiness_probe:
        description: As O(driver.readiness_probe), for this configuration.
        type: dict
      manager:
        description: As O(driver.manager), for this configuration.
        type: dict
        suboptions:
          image:
            description: Its image.
            type: str
            required: true
          env:
            description: Its settings.
            type: list
            elements: dict
      env:
        description: As O(driver.env), for this configuration.
        type: list
        elements: dict
      labels:
        description: As O(driver.labels), for this configuration.
        type: dict
      annotations:
        description: As O(driver.annotations), for this configuration.
        type: dict
  gpudirect_images:
    description:
      - The images a configuration with C(gds) or C(gdrcopy) true runs, tagged as O(driver.gds_image).
    type: dict
    default: {}
    suboptions:
      gds:
        description: The C(nvidia-fs) image.
        type: str
      gdrcopy:
        description: The C(gdrdrv) image.
        type: str
  daemonset_template:
    description:
      - The Jinja2 template of a driver DaemonSet, as text, rendered for each DaemonSet planned with the variables its
        header lists - the plan of that DaemonSet (name, labels, node selector, images, DTK side-car, GPUDirect side
        containers) and O(driver).
      - When omitted, the module's action hands it the driver role's template C(roles/driver/templates/daemonset.yml.j2)
        of this collection, read on the controller. Give it only to render a template of your own.
    type: str
  nodes:
    description:
      - The nodes to plan for, as C(nodes) of M(accelerators.gpu.nfd_labels) or Node objects as
        M(kubernetes.core.k8s_info) returns them. Only GPU nodes count.
      - When omitted the module lists the nodes itself (I(label_selector)), which gives the freshest view.
    type: list
    elements: dict
  label_selector:
    description:
      - Label selector of the nodes the module lists when I(nodes) is omitted. All nodes when omitted.
    type: str
  page_size:
    description:
      - Nodes per list request when the module lists the nodes. By default a fleet of up to 100 selected nodes is
        read in one request, a larger one in three (see O(accelerators.gpu.nfd_labels#module:page_size)), which
        the API server answers from its cache; set it to bound the size of each answer.
    type: int
  dtk_images:
    description:
      - DTK image by RHCOS version, as C(images) of M(accelerators.gpu.dtk_image_lookup) (whose unresolved entries
        block their version), or plain image references.
      - When omitted the module finds them as M(accelerators.gpu.dtk_image_lookup) does (not with I(mode=single)),
        from the C(openshift/driver-toolkit) image stream or I(dtk_overrides), and warns about an image that the
        cluster's mirror rules let no node pull.
    type: dict
  dtk_overrides:
    description:
      - DTK image by RHCOS version, winning over the image stream, when the module finds the DTK images itself
        (I(dtk_images) omitted).
    type: dict
    default: {}
  precompiled_available:
    description:
      - With I(mode=kernel), the precompiled driver images that exist; a kernel whose image is not listed falls back to a
        DTK build (RHCOS) or is blocked. When omitted every precompiled image is assumed to exist.
    type: list
    elements: str
  precompiled_registry_check:
    description:
      - With I(mode=kernel), ask the registry which precompiled driver images exist instead of I(precompiled_available),
        from the controller, as a node would pull them (through the cluster's mirror rules, with the pull secrets).
    type: dict
    suboptions:
      pull_secrets:
        description: Names of docker-registry Secrets in I(namespace); I(driver.image_pull_secrets) when omitted.
        type: list
        elements: str
      ca_file:
        description: PEM bundle of the CAs the registries' certificates must chain to; the system's when omitted.
        type: path
      validate_certs:
        description: Verify the registries' TLS certificates.
        type: bool
        default: true
      timeout:
        description: Seconds each registry request may take.
        type: int
        default: 10
  prepare_versions:
    description:
      - With I(mode=rhcos), RHCOS builds whose driver DaemonSet is planned and created even though no GPU node runs
        them yet, for example the target of an upgrade, so that each node that boots the build finds its driver
        DaemonSet there.
      - Such a DaemonSet selects the build's C(OSTREE_VERSION) label, so it has no pod until nodes run the build and
        are labelled. The driver image's tag follows from the build string (C(418.94.x) gives C(rhcos4.18),
        C(9.6.x) gives C(rhel9.6)). It is desired, so never deleted as stale while the build is listed here; once
        nodes run the build it is planned for them as any other.
      - A prepared DaemonSet carries the annotation C(accelerators.gpu/prepared-for-upgrade) (the build or kernel), so
        a run without I(prepare_versions), such as a deploy or reconcile while the upgrade goes on, keeps it instead of
        deleting it as stale (RV(kept) says why). Once nodes run its version the annotation goes with the next apply.
      - A listed build without a resolved DTK image (I(dtk_images), or the image stream) fails the module before any
        write.
      - With I(mode=kernel), kernels (as C(uname -r) gives them, for example C(5.15.0-105-generic)) whose precompiled
        DaemonSet C(nvidia-driver-daemonset-<sanitised kernel>-<osTag>) is planned for each OS (osTag) the GPU nodes
        run. It selects the kernel's C(kernel-version.full) label, so no node until nodes boot the kernel and are
        labelled. A listed kernel whose precompiled image does not exist (I(precompiled_available), or the registry
        with I(precompiled_registry_check)) fails the module before any write, naming the kernel and the image, as
        there is no DTK fallback for a kernel no node runs.
    type: list
    elements: str
    default: []
  allow_blocked:
    description:
      - Apply the other DaemonSets even when a blocked version leaves nodes without a driver. DaemonSets that still
        serve nodes are kept either way.
    type: bool
    default: false
  allow_downgrade:
    description:
      - Apply a driver change that moves GPU nodes to an older driver (RV(downgrades)). Without it such a change fails
        the module before any write, in check mode too (not with O(plan_only), which only reports it).
      - Versions compare in NVIDIA's order, number by number (570.86.15 < 570.172.08 < 580.95.05) over the components
        both have, so a precompiled image's branch (C(570)) is neither older nor newer than C(570.172.08). What a
        node runs is the newer of its DaemonSet's driver image as it exists and the driver GPU feature discovery
        reports loaded (C(nvidia.com/cuda.driver-version.full)). An image whose tag starts with no version (a digest,
        C(latest)) is never refused.
    type: bool
    default: false
  refuse_outdated:
    description:
      - Fail before any write when a driver pod runs an older revision than its DaemonSet's newest, or would once
        this run's pod template changes are applied, naming the nodes and DaemonSets (RV(outdated)).
      - C(OnDelete) DaemonSets replace a pod only when it is deleted; M(accelerators.gpu.driver_upgrade) does that node
        by node. Set this where driver changes must wait for such a rollout (the driver role's C(manual) policy).
    type: bool
    default: false
  plan_only:
    description:
      - Compute and return the plan without any write; I(created), I(updated) and I(deleted) then say what a run would
        do, and C(changed) is false.
    type: bool
    default: false
  wait:
    description:
      - After the writes, wait until every DaemonSet the GPU nodes need (RV(created), RV(updated), RV(unchanged)) is
        ready, as M(accelerators.gpu.operand_status) waits with C(wait_for=daemonsets), in the same module run; the
        wait's result is RV(status). A pull failure, a crash loop or a failed driver build ends the wait at once.
      - Not in check mode, and not with O(plan_only) or O(state=absent).
    type: dict
    suboptions:
      timeout:
        description: O(accelerators.gpu.operand_status#module:timeout) of the wait.
        type: int
        default: 300
      poll_interval:
        description: O(accelerators.gpu.operand_status#module:poll_interval) of the wait.
        type: float
        default: 2
      grace:
        description: O(accelerators.gpu.operand_status#module:grace) of the wait.
        type: int
        default: 20
      event_limit:
        description: O(accelerators.gpu.operand_status#module:event_limit) of the wait.
        type: int
        default: 5
      validation_check:
        description:
          - O(accelerators.gpu.operand_status#module:validation_check) of the wait, such as the driver's check; its
            plan is returned in RV(status) as C(validation).
        type: str
      accept_outdated:
        description:
          - O(accelerators.gpu.operand_status#module:accept_outdated) of the wait - a ready driver pod of an older
            revision serves its node until a rollout replaces it - with the nodes in RV(status) as C(outdated_nodes).
        type: bool
        default: false
attributes:
  check_mode:
    description: Writes are sent as server-side dry runs, so the API server validates them and stores nothing.
    support: full
  diff_mode:
    description: Returns each created, updated or deleted DaemonSet before and after.
    support: full
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
  - Jinja2 >= 3.0 (as ansible-core)
'''

EXAMPLES = r'''
- name: Read the GPU nodes
  accelerators.gpu.nfd_labels:
    manage_labels: true
  register: nfd

- name: Find the DTK image of each RHCOS version
  accelerators.gpu.dtk_image_lookup:
    versions: "{{ nfd.rhcos_versions }}"
  register: dtk

- name: One driver DaemonSet per RHCOS version, built with that version's DTK; wait until each GPU node has a driver
  accelerators.gpu.driver_daemonsets:
    namespace: nvidia-gpu-operator
    mode: rhcos
    dtk_images: "{{ dtk.images }}"
    driver:
      repository: nvcr.io/nvidia
      version: 550.90.07
      image_pull_secrets: [ngc]
    wait:
      timeout: 1500
  register: drivers

- name: Precompiled drivers per kernel where published, DTK builds elsewhere
  accelerators.gpu.driver_daemonsets:
    namespace: nvidia-gpu-operator
    mode: kernel
    driver:
      repository: nvcr.io/nvidia
      branch: "550"
      version: 550.90.07
    precompiled_available:
      - nvcr.io/nvidia/driver:550-5.14.0-427.33.1.el9_4.x86_64-rhcos4.16

- name: Before an RHCOS upgrade, the target build's DaemonSet, selecting no node until nodes boot the build
  accelerators.gpu.driver_daemonsets:
    namespace: nvidia-gpu-operator
    mode: rhcos
    prepare_versions: [9.6.20260401-0]
    driver:
      repository: nvcr.io/nvidia
      version: 570.172.08

- name: GPUDirect RDMA with the NVIDIA Network Operator's driver, GPUDirect Storage and GDRCopy
  accelerators.gpu.driver_daemonsets:
    namespace: nvidia-gpu-operator
    mode: rhcos
    driver:
      repository: nvcr.io/nvidia
      version: 570.172.08
      rdma: true
      gds_image: nvcr.io/nvidia/cloud-native/nvidia-fs:2.20.5
      gdrcopy_image: nvcr.io/nvidia/cloud-native/gdrdrv:v2.5

- name: An air-gapped Ubuntu pool - the kernel headers from a mirror whose CA is the site's
  accelerators.gpu.driver_daemonsets:
    namespace: nvidia-gpu-operator
    mode: single
    driver:
      repository: nvcr.io/nvidia
      version: 570.172.08
      repo_config: ubuntu-mirror
      cert_config: site-ca
      kernel_module_config: nvidia-module-params

- name: An older driver in the DaemonSets (a rollout, accelerators.gpu.driver_upgrade, then replaces the pods)
  accelerators.gpu.driver_daemonsets:
    namespace: nvidia-gpu-operator
    driver:
      repository: nvcr.io/nvidia
      version: 570.172.08
    allow_downgrade: true

- name: What would change, without writing
  accelerators.gpu.driver_daemonsets:
    namespace: nvidia-gpu-operator
    driver:
      repository: nvcr.io/nvidia
      version: 570.124.06
    plan_only: true
  register: plan

- name: Uninstall the driver DaemonSets
  accelerators.gpu.driver_daemonsets:
    namespace: nvidia-gpu-operator
    state: absent
'''

RETURN = r'''
precompiled_checks:
  description:
    - With I(precompiled_registry_check), by precompiled image, where it was found (C(found), the mirror or source that
      answered) or why not (C(attempts), each with C(reference), C(status) and C(reason)).
  returned: when precompiled_registry_check is given
  type: dict
created:
  description: DaemonSets created (or that would be, in check mode and with I(plan_only)).
  returned: always
  type: list
  elements: str
  sample: [nvidia-driver-daemonset-418.94.202509100653-0]
updated:
  description: DaemonSets updated (or that would be). Their pods change only when deleted (C(OnDelete)).
  returned: always
  type: list
  elements: str
unchanged:
  description: DaemonSets that already match.
  returned: always
  type: list
  elements: str
deleted:
  description: DaemonSets deleted (or that would be).
  returned: always
  type: list
  elements: str
kept:
  description: DaemonSets not desired but kept, or left alone, with the reason (C(name), C(reason)).
  returned: always
  type: list
  elements: dict
  sample: [{name: nvidia-driver-daemonset-416.94.202405081406-0, reason: "not desired, but it still has pods (...)"}]
blocked:
  description: Node groups that get no DaemonSet (C(key), the version or kernel; C(nodes); C(reason)).
  returned: always
  type: list
  elements: dict
  sample: [{key: 9.6.20260303-1, nodes: [worker-3], reason: "RHCOS 9.6.20260303-1 has no tag in image stream ..."}]
assignments:
  description:
    - By GPU node, its DaemonSet (C(daemonset)) and build (C(build) is C(dtk), C(precompiled), C(compile), C(host) for a
      pre-installed driver, C(none) when opted out, C(blocked)), with the images or the reason.
  returned: with I(state=present)
  type: dict
  sample: {worker-0: {daemonset: nvidia-driver-daemonset-416.94.202405081406-0, build: dtk,
                      image: "nvcr.io/nvidia/driver:550.90.07-rhcos4.16", dtk_image: "quay.io/...@sha256:..."}}
prepared:
  description: DaemonSets of I(prepare_versions) builds or kernels that no GPU node runs yet (created, updated or unchanged).
  returned: with I(state=present)
  type: list
  elements: str
  sample: [nvidia-driver-daemonset-9.6.20260401-0]
images:
  description: Every image of the desired DaemonSets (driver, DTK side-cars, GDS and GDRCopy), sorted, each once.
  returned: with I(state=present)
  type: list
  elements: str
  sample: ["nvcr.io/nvidia/driver:570.172.08-rhcos4.18", "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:..."]
left_without_driver:
  description: Blocked nodes that no kept DaemonSet serves with a driver built for what they run.
  returned: always
  type: list
  elements: str
mismatched:
  description: GPU nodes whose NFD label differs from what they run (C(node), C(label), C(effective), C(message)).
  returned: with I(state=present)
  type: list
  elements: dict
outdated:
  description:
    - The DaemonSet of each node whose driver pod is outdated, or would be once this run's pod template changes are
      applied, and of each node that moves to another configuration (RV(moves)).
  returned: with O(refuse_outdated), and in check mode
  type: dict
  sample: {worker-0: nvidia-driver-daemonset-418.94.202509100653-0}
owners:
  description:
    - The driver configuration of each GPU node that gets a driver DaemonSet (the owner label's value).
  returned: with I(state=present)
  type: dict
  sample: {worker-0: default, worker-1: a100}
moves:
  description:
    - The GPU nodes owned by one configuration that another now selects (C(from), C(to)) - moved by the rollout, and
      counted in RV(outdated).
  returned: with I(state=present)
  type: dict
  sample: {worker-1: {from: default, to: a100}}
owner_labelled:
  description:
    - The nodes whose owner label (or move mark) this run set.
  returned: when the DaemonSets were applied (not in check mode)
  type: list
  elements: str
downgrades:
  description:
    - The GPU nodes this run's plan moves to an older driver, each with the version it runs (C(running)), the one
      planned (C(requested)) and its DaemonSet.
  returned: with I(state=present)
  type: dict
  sample: {gpu-a100-0: {running: 580.95.05, requested: 570.172.08, daemonset: nvidia-driver-daemonset-418.94.202509100653-0}}
downgrade_refusal:
  description: On a refusal of RV(downgrades), the versions and nodes refused, in words (the message says the rest).
  returned: on failure for a downgrade
  type: str
  sample: refusing to downgrade the driver from 580.95.05 to 570.172.08 on 2 GPU node(s) (gpu-a100-0, gpu-a100-1)
upgrade_in_progress:
  description:
    - The selected nodes whose C(nvidia.com/gpu-driver-upgrade-state) is a step of a driver rollout not finished (from
      C(cordon-required) to C(uncordon-required)) or C(upgrade-failed), sorted.
    - With no outdated driver pod either (C(outdated_nodes) of RV(status)), there is no rollout to plan or resume.
  returned: with I(state=present)
  type: list
  elements: str
  sample: [worker-3]
plan:
  description: On failure because of blocked versions, what the run would have done (the keys above); nothing was written.
  returned: on failure for blocked versions
  type: dict
status:
  description:
    - What the wait of O(wait) found, as M(accelerators.gpu.operand_status) returns it (C(ready), C(ready_nodes),
      C(ready_pods), C(daemonsets), C(validation), C(nodes)...).
  returned: when O(wait) is given, the DaemonSets were applied and some GPU node needs one
  type: dict
api_requests:
  description: API requests sent by the module, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
  returned: always
  type: dict
  sample: {"GET": 3, "PATCH": 1}
api_response_bytes:
  description:
    - Bytes of the API server's answers to the module's requests (node lists come in the smallest view that carries
      what the module reads, compressed when large). C(wire) as received, C(json) once decoded.
  returned: always
  type: dict
  sample: {"wire": 2600000, "json": 36000000}
api_faults:
  description: The API server's faults (429, 5xx, lost connections) met and retried, as a warning says too.
  returned: when a request met a fault
  type: dict
  sample: {"faults": {"503": 3, "refused": 2}, "retried": 4, "given_up": 0, "seconds": 4.1}
'''

from ansible_collections.accelerators.gpu.plugins.module_utils.runner.module import run_module
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.daemonsets import run
from ansible_collections.accelerators.gpu.plugins.module_utils.operands.wait import WAIT_ARGUMENT_SPEC

DRIVER_OPTIONS = dict(
    repository=dict(type='str'),
    image=dict(type='str'),
    version=dict(type='str'),
    branch=dict(type='str'),
    image_ref=dict(type='str'),
    image_pull_policy=dict(type='str', choices=['Always', 'IfNotPresent', 'Never']),
    image_pull_secrets=dict(type='list', elements='str', no_log=False),
    env=dict(type='list', elements='dict'),
    resources=dict(type='dict'),
    trusted_ca_config_map=dict(type='str'),
    repo_config=dict(type='str'),
    cert_config=dict(type='str'),
    kernel_module_config=dict(type='str'),
    secret_env=dict(type='str', no_log=False),
    tolerations=dict(type='list', elements='dict'),
    labels=dict(type='dict'),
    annotations=dict(type='dict'),
    node_selector=dict(type='dict'),
    startup_probe=dict(type='dict'),
    liveness_probe=dict(type='dict'),
    readiness_probe=dict(type='dict'),
    service_account_name=dict(type='str'),
    priority_class_name=dict(type='str'),
    manager=dict(type='dict', options=dict(
        image=dict(type='str', required=True),
        env=dict(type='list', elements='dict'),
    )),
    rdma=dict(type='bool', default=False),
    use_host_mofed=dict(type='bool', default=False),
    gds_image=dict(type='str'),
    gdrcopy_image=dict(type='str'),
    kernel_module_type=dict(type='str', choices=['auto', 'open', 'proprietary']),
)
# A configuration's settings over the driver option's: unset ones (None) are the driver option's.
CONFIGURATION_OPTIONS = dict(
    dict((key, dict((k, v) for k, v in DRIVER_OPTIONS[key].items() if k != 'default')) for key in (
        'version', 'repository', 'image', 'branch', 'image_ref', 'image_pull_policy', 'image_pull_secrets',
        'kernel_module_type', 'repo_config', 'cert_config', 'kernel_module_config', 'secret_env', 'rdma',
        'use_host_mofed', 'resources', 'tolerations', 'priority_class_name', 'startup_probe', 'liveness_probe',
        'readiness_probe', 'manager', 'env', 'labels', 'annotations')),
    name=dict(type='str', required=True),
    default=dict(type='bool', default=False),
    node_selector=dict(type='dict'),
    node_affinity=dict(type='dict'),
    use_precompiled=dict(type='bool'),
    upgrade_policy=dict(type='dict', options=dict(max_parallel=dict(type='int'), max_unavailable=dict(type='raw'))),
    gds=dict(type='bool'),
    gdrcopy=dict(type='bool'),
)


def main():
    run_module(dict(
        namespace=dict(type='str', required=True),
        state=dict(type='str', choices=['present', 'absent'], default='present'),
        mode=dict(type='str', choices=['rhcos', 'kernel', 'single'], default='rhcos'),
        driver=dict(type='dict', options=DRIVER_OPTIONS),
        configurations=dict(type='list', elements='dict', options=CONFIGURATION_OPTIONS),
        gpudirect_images=dict(type='dict', default={}, options=dict(gds=dict(type='str'), gdrcopy=dict(type='str'))),
        daemonset_template=dict(type='str'),
        nodes=dict(type='list', elements='dict'),
        label_selector=dict(type='str'),
        page_size=dict(type='int'),
        dtk_images=dict(type='dict'),
        dtk_overrides=dict(type='dict', default={}),
        precompiled_available=dict(type='list', elements='str'),
        precompiled_registry_check=dict(type='dict', options=dict(
            pull_secrets=dict(type='list', elements='str', no_log=False),
            ca_file=dict(type='path'),
            validate_certs=dict(type='bool', default=True),
            timeout=dict(type='int', default=10),
        )),
        prepare_versions=dict(type='list', elements='str', default=[]),
        allow_blocked=dict(type='bool', default=False),
        allow_downgrade=dict(type='bool', default=False),
        refuse_outdated=dict(type='bool', default=False),
        plan_only=dict(type='bool', default=False),
        wait=dict(type='dict', options=dict((name, WAIT_ARGUMENT_SPEC[name]) for name in (
            'timeout', 'poll_interval', 'grace', 'event_limit', 'validation_check', 'accept_outdated'))),
    ), run, required_if=[('state', 'present', ['driver', 'daemonset_template'])],
        mutually_exclusive=[('precompiled_available', 'precompiled_registry_check')])


if __name__ == '__main__':
    main()
