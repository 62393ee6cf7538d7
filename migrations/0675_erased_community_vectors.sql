-- An erase (delete_episode with p_erase) blanks the name and summary of the communities whose
-- members' facts came from the erased text, but until now kept the vector of the old name: a
-- cosine search still found such a community by what the erased episode said. Blanked
-- communities are exactly the current ones without a summary (summary_kind 'none') that still
-- have a vector (a detection writes none; only a refresh does, with a summary kind): their
-- vectors go; the next refresh names them again (sql/57_communities.sql).
UPDATE pgmemory.communities SET name_embedding = NULL
 WHERE summary_kind = 'none' AND name_embedding IS NOT NULL;
