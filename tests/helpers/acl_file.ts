/** Writes an ACL file into `dir` and returns its path. */
export async function writeAcl(dir: string, text: string, name = "acl.txt"): Promise<string> {
  const path = `${dir}/${name}`;
  await Deno.writeTextFile(path, text);
  return path;
}
