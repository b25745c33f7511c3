# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The status table: which columns a view shows, the text of each cell, and the lines they make.

Pure. The rows are stack_status's, each with its not-ready reasons (its problems).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Every column, in the order of the wide view: (name, title). The names are what a selection lists.
COLUMNS = (('node', 'NODE'), ('gpus', 'GPUS'), ('product', 'PRODUCT'), ('memory', 'MEMORY MiB'),
           ('mig_capable', 'MIG'), ('os', 'RHCOS / KERNEL'), ('driver_daemonset', 'DRIVER DAEMONSET'),
           ('driver_configuration', 'DRIVER CONFIG'),
           ('driver', 'DRIVER'), ('kernel_modules', 'KERNEL MODULES'), ('driver_upgrade', 'DRIVER UPGRADE'),
           ('toolkit', 'TOOLKIT'), ('device_plugin', 'DEVICE PLUGIN'), ('sharing', 'SHARING'), ('mps_control_daemon', 'MPS DAEMON'),
           ('dra_driver', 'DRA DRIVER'), ('dcgm_exporter', 'DCGM EXPORTER'), ('gpu_feature_discovery', 'GFD'),
           ('mig_manager', 'MIG MANAGER'), ('mig_config', 'MIG CONFIG'), ('allocatable', 'ALLOCATABLE'),
           ('dra_devices', 'DRA DEVICES'), ('validation', 'LAST VALIDATION'), ('health', 'HEALTH'), ('stack', 'STACK'))
TITLES = dict(COLUMNS)
# The selection of every column.
WIDE = 'wide'
# The default view: these, with the driver upgrade and MIG layout columns before STACK only while some node has one
# under way. STACK last: its long cells are the ones shortened.
DEFAULT = ('node', 'gpus', 'product', 'driver', 'stack')
UNDER_WAY = ('driver_upgrade', 'mig_config')
# The driver upgrade state of a node no upgrade is under way on.
UPGRADE_AT_REST = ('-', 'upgrade-done')
# The default view fits a terminal of 120 columns as ansible-playbook prints it, each line indented and quoted in a
# list: '        "<line>",'.
WIDTH = 120 - len('        "",')
# A shortened cell keeps at least this much of its text.
SHORTEST = 20
ELLIPSIS = '\u2026'


def selected_columns(selection):
    """The columns a selection names, checked: None for the default view (no selection, or no name in it); else the
    names to show, NODE first, in the order given: every column for 'wide', else the names listed (a list, or a
    comma-separated string), in any case. ValueError names the unknown ones and the valid names."""
    if not isinstance(selection, (list, tuple)):
        selection = str(selection or '').split(',')
    names = [str(name).strip().lower() for name in selection if str(name).strip()]
    if not names:
        return None
    if names == [WIDE]:
        return [name for name, _title in COLUMNS]
    unknown = [name for name in names if name not in TITLES]
    if unknown:
        raise ValueError('unknown status column%s %s: the columns are %s; or %s alone for all of them' % (
            's' if len(unknown) > 1 else '', ', '.join(repr(name) for name in unknown),
            ', '.join(name for name, _title in COLUMNS), WIDE))
    shown = ['node']
    for name in names:
        if name not in shown:
            shown.append(name)
    return shown


def under_way(row, column):
    """Whether a row's driver upgrade (column driver_upgrade) or MIG layout (mig_config) is under way: a driver
    upgrade state other than none or done, a MIG layout not applied (yet) with success."""
    if column == 'driver_upgrade':
        return row['driver_upgrade'] not in UPGRADE_AT_REST
    return bool(row['mig_config']) and row['mig_config_state'] != 'success'


def shown_columns(columns, rows):
    """The names of the columns of the table of rows: columns (selected_columns()), else the default view's."""
    if columns is not None:
        return columns
    return list(DEFAULT[:-1]) + [column for column in UNDER_WAY if any(under_way(row, column) for row in rows)] + [
        DEFAULT[-1]]


def cell(row, column, problems):
    """The text of a row's cell of column; problems: the row's not-ready reasons."""
    value = row.get(column)
    if column == 'stack':
        return problems[0] if problems else 'ready'
    if column == 'driver':
        # The version of the driver loaded, and the state of the driver pod, 'host' or '-' (none).
        return ' '.join(part for part in (row['driver_version'], value if value != '-' else None) if part) or '-'
    if column == 'kernel_modules':
        # The modules, and 'auto' where the driver container chooses them.
        if row['kernel_module_type'] == 'auto':
            return '%s (auto)' % value if value else 'auto'
        return '-' if value is None else value
    if column == 'mig_capable':
        return '-' if value is None else 'yes' if value else 'no'
    if column == 'sharing':
        return '-' if value is None else value if value == 'none' else '%s x%s' % (value, row['sharing_replicas'])
    if column == 'mig_config':
        return '%s (%s)' % (value, row['mig_config_state'] or 'no state') if value else '-'
    if column == 'dra_devices':
        return '-' if value is None else '%d (%d allocated)' % (value, row['dra_allocated'])
    if column == 'health':
        return health_cell(row)
    if column == 'validation':
        return ' '.join('%s:%s' % item for item in value.items()) + (
            ' (%s)' % row['validated_at'] if row['validated_at'] else '') if value else '-'
    return '-' if value is None else str(value)


def health_cell(row):
    """The health of a row's GPUs (its gpu_faults, health.records' faults): 'ok' without faults, else the action they
    ask for (none: reported only) and what each is, its XID or its source."""
    faults = row.get('gpu_faults') or []
    if not faults:
        return 'ok'
    return '%s: %s' % (row['health'] if row['health'] != 'none' else 'reported', ', '.join(
        'XID %d' % fault['xid'] if fault['xid'] is not None else fault['source'] for fault in faults))


def fault_lines(rows):
    """The GPU faults asking for an action, one a line under a header (NODE, GPU: its UUID, else its PCI bus ID or
    index, XID, ACTION, SOURCE), after a title line; [] where there are none. Application errors (action none) are
    left to the HEALTH column."""
    cells = [[row['node'], fault['gpu_uuid'] or fault['pci_bus_id'] or (
        '-' if fault['gpu_index'] is None else 'gpu %d' % fault['gpu_index']),
        '-' if fault['xid'] is None else str(fault['xid']), fault['action'], fault['source']]
        for row in rows for fault in row.get('gpu_faults') or [] if fault['action'] != 'none']
    if not cells:
        return []
    nodes = len(set(line[0] for line in cells))
    return ['Unhealthy GPUs on %d node%s:' % (nodes, '' if nodes == 1 else 's')] + aligned(
        [['NODE', 'GPU', 'XID', 'ACTION', 'SOURCE']] + cells)


def shortened(text, width):
    """text cut to width with an ellipsis where it is longer."""
    return text if len(text) <= width else text[:width - len(ELLIPSIS)].rstrip() + ELLIPSIS


def aligned(cells, width=None):
    """Lines of cells (lists of text of the same length, the header first) as text lines, each column as wide as
    its widest cell. With a width, the last column's cells are shortened so that every line fits it, keeping at
    least SHORTEST characters of each."""
    widths = [max(len(line[index]) for line in cells) for index in range(len(cells[0]))]
    if width is not None:
        room = width - sum(widths[:-1]) - 2 * (len(widths) - 1)
        widths[-1] = min(widths[-1], max(room, SHORTEST))
        cells = [line[:-1] + [shortened(line[-1], widths[-1])] for line in cells]
    return ['  '.join(text.ljust(size) for text, size in zip(line, widths)).rstrip() for line in cells]


def table(rows, problems, selection=None, clusters=None):
    """The rows as aligned text lines under a header, in the columns of selection (selected_columns()), else of the
    default view, which fits WIDTH. problems: each row's not-ready reasons; clusters: each row's cluster, for a
    CLUSTER column first."""
    columns = selected_columns(selection)
    shown = shown_columns(columns, rows)
    cells = [[TITLES[column] for column in shown]] + [
        [cell(row, column, reasons) for column in shown] for row, reasons in zip(rows, problems)]
    if clusters is not None:
        cells = [['CLUSTER'] + cells[0]] + [[str(cluster)] + line for cluster, line in zip(clusters, cells[1:])]
    return aligned(cells, WIDTH if columns is None else None)
