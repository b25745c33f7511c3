#!/usr/bin/python
# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: dtk_image_lookup
short_description: Driver Toolkit (DTK) image of each RHCOS version, as the nodes will pull it
version_added: 0.1.0
author: accelerators.gpu developers (@accelerators-gpu)
description:
  - For a list of RHCOS versions (typically C(rhcos_versions) of M(accelerators.gpu.nfd_labels)), returns the DTK
    image of each from the C(openshift/driver-toolkit) ImageStream (C(.spec.tags[name].from.name), C(latest) skipped),
    with the tag's history from C(.status).
  - A version without a tag is marked unresolved with the reason, never given another version's image (a driver built
    with another RHCOS version's DTK does not load). The module also explains a broken stream (a tag with an empty
    name, fixed by deleting the stream), an unresolved C(0.0.1-snapshot-machine-os) placeholder, and a missing stream
    (not OpenShift, or the stream absent).
  - Explicit I(overrides) pin images per version.
  - With I(release), also resolves the DTK image and the RHCOS build of a release that is not installed yet, with
    C(oc adm release info <release> --output=json) (the image of its C(driver-toolkit) reference, the version of its
    C(machine-os) component).
  - Applies the cluster's ImageDigestMirrorSet, ImageTagMirrorSet and ImageContentSourcePolicy rules and reports, beside
    each image, the references a node tries in order (I(candidates)) and the first (I(pull_from)).
  - Never changes anything. Every result carries I(api_requests), the API requests sent, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
options:
  versions:
    description:
      - RHCOS versions to find the DTK image of, for example C(416.94.202405081406-0) or C(9.6.20260303-1).
    type: list
    elements: str
    default: []
  overrides:
    description:
      - DTK image by RHCOS version; an override wins over the image stream.
    type: dict
    default: {}
  apply_mirrors:
    description:
      - Read the cluster's mirror rules and report the references nodes pull. Without them I(pull_from) is the image.
    type: bool
    default: true
  release:
    description:
      - An OpenShift release (version such as C(4.18.22), or release image) whose DTK image and RHCOS build to find
        with C(oc).
      - The result is in I(release).
    type: str
  oc_path:
    description:
      - Path of the C(oc) client for I(release); found in C(PATH) when omitted.
    type: path
  idms_file:
    description:
      - The site's ImageDigestMirrorSet file, passed to C(oc adm release info --idms-file) so that C(oc) reads the
        release from the mirror.
    type: path
  registry_config:
    description:
      - Registry credentials file for C(oc adm release info --registry-config).
    type: path
  fail_on_unresolved:
    description:
      - Fail when a version has no usable DTK image, instead of returning it in I(unresolved) with a warning.
    type: bool
    default: false
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - accelerators.gpu.api_retry
  - accelerators.gpu.read_only
requirements:
  - kubernetes >= 24.2.0
  - PyYAML >= 3.11
  - the C(oc) client, only with I(release)
'''

EXAMPLES = r'''
- name: Read the GPU nodes
  accelerators.gpu.nfd_labels:
  register: nfd

- name: Find the DTK image of each RHCOS version the GPU nodes run
  accelerators.gpu.dtk_image_lookup:
    versions: "{{ nfd.rhcos_versions }}"
  register: dtk

- name: Stop when a version has no DTK image
  ansible.builtin.assert:
    that: dtk.unresolved | length == 0
    fail_msg: "{{ dtk.unresolved | map('extract', dtk.images) | map(attribute='message') | list }}"

- name: Before an upgrade, find the DTK image of the target release through the site's mirror
  accelerators.gpu.dtk_image_lookup:
    release: 4.18.22
    idms_file: /etc/mirror/idms.yaml
  register: next_dtk

- name: Pin a DTK image for one version (a site whose stream lacks the tag)
  accelerators.gpu.dtk_image_lookup:
    versions: "{{ nfd.rhcos_versions }}"
    overrides:
      418.94.202509100653-0: mirror.example.com/ocp/release@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
'''

RETURN = r'''
images:
  description: DTK image of each requested RHCOS version.
  returned: always
  type: dict
  sample:
    416.94.202405081406-0:
      image: quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:2c9a...
      pull_from: mirror.example.com/ocp-v4.0-art-dev@sha256:2c9a...
      candidates: [mirror.example.com/ocp-v4.0-art-dev@sha256:2c9a..., quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:2c9a...]
      source: imagestream
      status: resolved
      message: DTK image for RHCOS 416.94.202405081406-0 from image stream openshift/driver-toolkit
      history: [{image: quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:2c9a..., created: "2024-06-01T10:00:00Z",
                 digest: "sha256:2c9a..."}]
  contains:
    image:
      description: The DTK image reference, or null when unresolved.
      type: str
    pull_from:
      description: The first reference a node tries after mirror rules, or null.
      type: str
    candidates:
      description: References a node tries, in order (mirrors, then the source unless C(NeverContactSource)).
      type: list
      elements: str
    source:
      description: C(override), C(imagestream), or null when unresolved.
      type: str
    status:
      description: C(resolved), C(missing) (no tag, or no stream), C(broken) (stream broken), C(placeholder).
      type: str
    message:
      description: Where the image comes from or, when unresolved, why and what to do.
      type: str
    history:
      description: The tag's image history from the stream's status, newest first.
      type: list
      elements: dict
unresolved:
  description: Requested versions without a usable DTK image.
  returned: always
  type: list
  elements: str
problems:
  description: Problems of the image stream or the mirror rules (broken stream, placeholder, missing stream, blocked pulls).
  returned: always
  type: list
  elements: str
notes:
  description: Observations that need no action (tags that are not RHCOS versions, several RHCOS streams).
  returned: always
  type: list
  elements: str
mirror_rules:
  description: The mirror rules applied, in the order found (C(source), C(mirrors), C(pull), C(never_contact_source), C(origin)).
  returned: always
  type: list
  elements: dict
release:
  description:
    - The DTK image of I(release) (C(release), C(image), C(pull_from), C(candidates)) and the RHCOS build the
      release boots (C(rhcos), null when the release does not say).
  returned: when I(release) is given
  type: dict
api_requests:
  description: API requests sent by the module, by HTTP verb, and
    I(api_response_bytes), the bytes of the answers.
  returned: always
  type: dict
  sample: {"GET": 4}
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
from ansible_collections.accelerators.gpu.plugins.module_utils.driver.dtk_image_lookup import run


def main():
    run_module(dict(
        versions=dict(type='list', elements='str', default=[]),
        overrides=dict(type='dict', default={}),
        apply_mirrors=dict(type='bool', default=True),
        release=dict(type='str'),
        oc_path=dict(type='path'),
        idms_file=dict(type='path'),
        registry_config=dict(type='path'),
        fail_on_unresolved=dict(type='bool', default=False),
    ), run)


if __name__ == '__main__':
    main()
