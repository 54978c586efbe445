"""The one YAML reader: config files (ours, upstream's all_config.yaml) and sweep grids are parsed here.

YAML can say in a few bytes what is gigabytes as data: an alias (`*a`) repeats the whole node its anchor
(`&a`) names, and aliases of aliases multiply (a 1 KB "billion laughs" file). The document is measured as
it will be used, every alias expanded, before a value is built from it: more than `MAX_EXPANDED` (nodes
plus characters of text), or an alias inside the node it names (a loop), is refused in one short line.
A key written twice in one mapping is refused, as the JSON reader refuses it (YAML forbids it; PyYAML
would keep the last value silently); a merge key (`<<: *base`) is no repeat: the keys written beside it
override the merged ones, as YAML defines. Only YAML's plain types are built (the safe loader: a tag
such as `!!python/object` is an error, never an object). A file is at most `MAX_YAML_BYTES`; a message
echoes at most a short cut of any value.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from trm_kaggle.errors import DataError
from trm_kaggle.jsonio import MAX_INT_DIGITS, read_text
from trm_kaggle.wording import clipped

MAX_YAML_BYTES = 1 << 20  # upstream's all_config.yaml is 2 KB, a sweep grid a few KB
MAX_EXPANDED = 4 << 20  # nodes + characters of text, aliases expanded: more than any file of MAX_YAML_BYTES holds
_MERGE = "tag:yaml.org,2002:merge"


class _TooLarge(Exception):
    pass


def twice_in_one_mapping(key: Any) -> str:
    """Why a mapping that writes `key` twice is refused: a file's, and an override's `{k: v}` (one rule)."""
    return (f"the key {clipped(key, 60)} appears twice in one mapping (the JSON reader refuses that too; YAML leaves "
            "no way to tell which was meant)")


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key repeated in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the safe loader says so
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(None, None, twice_in_one_mapping(key), key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """YAML's integers (decimal, 0x, 0o, 0b, with `_`), none longer than the JSON reader takes (however
        written: 0x and 0b text has no limit of Python's, but its value would be refused by every print). YAML
        1.1's surprises are refused, not read: base 60 (`seed: 1:20` is 80) and a leading 0 (`010` is 8)."""
        _no_surprise(node, "integer")
        try:
            value = super().construct_yaml_int(node)
        except ValueError:  # Python's own limit on decimal text
            value = None
        if value is None or abs(value) >= _INT_LIMIT:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer longer than {MAX_INT_DIGITS:,} digits (at most {MAX_INT_DIGITS:,} are read)",
                node.start_mark)
        return value


    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        _no_surprise(node, "number")
        return super().construct_yaml_float(node)


def _no_surprise(node: yaml.ScalarNode, kind: str) -> None:
    """ConstructorError for a YAML 1.1 number whose value is not what it reads as in any other format."""
    text = node.value.replace("_", "").lstrip("+-")
    why = ("is base 60 in YAML 1.1" if ":" in text else
           "is octal in YAML 1.1 (a leading 0)" if kind == "integer" and len(text) > 1 and text[0] == "0"
           and text[1].isdigit() else None)
    if why:
        raise yaml.constructor.ConstructorError(
            None, None, f"the {kind} {clipped(node.value, 40)} {why}: write the number itself, or quote it as text",
            node.start_mark)


_INT_LIMIT = 10 ** MAX_INT_DIGITS
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)


def _expanded_size(node: yaml.Node, memo: dict[int, int], open_nodes: set[int]) -> int:
    """Nodes plus characters of text of `node` with every alias expanded, counted once per node object (an alias
    is the same node object again: its size is looked up, never recounted); _TooLarge past MAX_EXPANDED."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in open_nodes:
        raise _TooLarge("an alias refers to a node that contains it (a loop)")
    open_nodes.add(key)
    if isinstance(node, yaml.ScalarNode):
        size = 1 + len(node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(child, memo, open_nodes) for child in node.value)
    else:
        size = 1 + sum(_expanded_size(k, memo, open_nodes) + _expanded_size(v, memo, open_nodes) for k, v in node.value)
    open_nodes.discard(key)
    if size > MAX_EXPANDED:
        raise _TooLarge(f"it expands to more than {MAX_EXPANDED:,} nodes and characters (aliases of aliases: "
                        "a few bytes that stand for gigabytes)")
    memo[key] = size
    return size


def parse_yaml(text: str, where: str, what: str = "YAML file") -> Any:
    """The value of one YAML document, or DataError `"{where}: ..."` in one short line for any problem."""
    try:
        loader = _Loader(text)  # reads the first characters at once: a NUL or BEL is a ReaderError here
    except yaml.YAMLError as e:
        raise DataError(f"{where}: not valid YAML: {clipped(' '.join(str(e).split()), 300)}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {}, set())
        return loader.construct_document(node)
    except _TooLarge as e:
        raise DataError(f"{where}: refused {what}: {e}") from None
    except yaml.YAMLError as e:
        said = " ".join(str(e).split()).replace(' in "<unicode string>",', " at")
        raise DataError(f"{where}: not valid YAML: {said[:300]}{'...' if len(said) > 300 else ''}") from None
    except RecursionError:
        raise DataError(f"{where}: not a {what}: nested too deeply") from None
    except ValueError as e:  # a value the constructors cannot make (a sexagesimal int of 5,000 digits, a date)
        raise DataError(f"{where}: not a {what}: {clipped(str(e), 200)}") from None
    finally:
        loader.dispose()


def read_yaml(path: str | os.PathLike, what: str = "YAML file", hint: str | None = None) -> Any:
    """A YAML file's value, read by the one reader (`read_text`: regular files only, at most MAX_YAML_BYTES)."""
    return parse_yaml(read_text(path, what, hint, max_bytes=MAX_YAML_BYTES), os.fspath(path), what)
