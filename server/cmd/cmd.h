/* cmd.h - the attnd subcommands. Each takes argv with argv[0] = the subcommand name and
 * returns the process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef ATTND_CMD_H
#define ATTND_CMD_H

int cmd_info(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_heads(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_grammar(int argc, char **argv);
int cmd_template(int argc, char **argv);

#endif
