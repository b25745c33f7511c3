"""Makes the site `antsibull-docs sphinx-init` wrote build without a network (make docs).

The generated conf.py fetches the intersphinx inventories of docs.python.org, jinja.palletsprojects.com and
docs.ansible.com when Sphinx starts; with no network each is a warning, and the build treats warnings as errors.
The collection's pages link to a few labels of the Ansible docs only (the action plugin note, the common return
values, the configuration settings, and the kubernetes.core and community.okd modules the docs name). This writes
those labels into a local inventory of the Ansible docs (DEST/ansible_devel.inv), pointing at their pages on
docs.ansible.com, and makes conf.py read that inventory instead of fetching any. A page that links to another
label of the Ansible docs fails the build with "undefined label": add the label to LABELS.

Usage: docs-intersphinx.py DEST (the directory sphinx-init wrote)
"""
import os
import sys
import zlib

ANSIBLE_DOCS = "https://docs.ansible.com/projects/ansible/devel/"

# label: (page and anchor under ANSIBLE_DOCS, title)
LABELS = {
    "action_plugins": ("plugins/action.html#action-plugins", "Action plugins"),
    "common_return_values": ("reference_appendices/common_return_values.html#common-return-values", "Return Values"),
    "ansible_configuration_settings": (
        "reference_appendices/config.html#ansible-configuration-settings",
        "Ansible Configuration Settings",
    ),
}
# Modules of other collections the docs link to (ansible_collections.<namespace>.<name>.<module>_module).
MODULES = [
    "kubernetes.core.k8s",
    "kubernetes.core.k8s_info",
    "kubernetes.core.k8s_drain",
    "community.okd.k8s_auth",
]


def module_label(fqcn):
    namespace, name, module = fqcn.split(".")
    label = f"ansible_collections.{fqcn}_module"
    page = f"collections/{namespace}/{name}/{module}_module.html#{label.replace('.', '-').replace('_', '-')}"
    return label, (page, f"{fqcn} module")


def inventory():
    labels = dict(LABELS)
    labels.update(module_label(fqcn) for fqcn in MODULES)
    header = (
        "# Sphinx inventory version 2\n"
        "# Project: Ansible\n"
        "# Version: devel\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    body = "".join(f"{label} std:label -1 {page} {title}\n" for label, (page, title) in sorted(labels.items()))
    return header.encode() + zlib.compress(body.encode())


def main(dest):
    with open(os.path.join(dest, "ansible_devel.inv"), "wb") as f:
        f.write(inventory())
    with open(os.path.join(dest, "conf.py"), "a", encoding="utf-8") as f:
        f.write(
            "\n# make docs (tools/docs-intersphinx.py): the Ansible docs' labels from a local inventory, no fetching.\n"
            f"intersphinx_mapping = {{'ansible_devel': ({ANSIBLE_DOCS!r}, '../ansible_devel.inv')}}\n"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
