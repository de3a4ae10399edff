//===- loomc.cpp - the Loom compiler driver -------------------------------===//
#include "loom/Pipelines.h"

int main(int argc, char **argv) { return loom::loomcMain(argc, argv); }
